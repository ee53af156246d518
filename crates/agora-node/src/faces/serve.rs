//! The shared serving layer of the node's HTTP and WebSocket faces (the AGH face, the HTTP API
//! and the JSON-RPC face): its own accept loop in front of each face's axum router.
//!
//! What this module owns, for every connection of those faces:
//!
//! - **Connection limit** ([`FaceLimits::max_connections`], per face): a connection beyond it is
//!   answered `503 Service Unavailable` with a short JSON body and closed, as the AGTP face does.
//!   Refusals in progress are bounded by the same number; past that a connection is dropped
//!   unanswered. A slot is held until the socket closes, WebSocket sessions included.
//! - **Request heads in time** ([`FaceLimits::header_timeout`]): hyper's header read timeout. The
//!   request line and headers (a WebSocket upgrade request too) must arrive within it, counted
//!   from the accept or, on a keep-alive connection, from the end of the previous response: a
//!   client that trickles its headers, or keeps an idle HTTP connection, is closed. A head over
//!   64 KiB is answered `431`.
//! - **Requests in time** ([`FaceLimits::request_timeout`]): a request's body must arrive and its
//!   answer be ready within it (`408` otherwise); a connection with no byte either way for that
//!   long (a client that does not read its answer) is closed.
//! - **Idle WebSockets** ([`FaceLimits::ws_idle_timeout`]): after an upgrade, a connection from which
//!   no byte arrives (no frame, ping or pong) for that long is closed; the session sees a read
//!   error of kind [`std::io::ErrorKind::TimedOut`]. The faces ping their clients every
//!   [`ws_ping_interval`], so a client that reads answers in time.
//! - **Who may call** ([`Access`], checked before the face's handlers, in this order): the
//!   `Host` must name the node (`421`), a browser's `Origin` must be allowed on WebSocket
//!   upgrades and state-changing requests (`403`), and the API key must be presented as
//!   `Authorization: Bearer <key>` where this layer checks it (`401`).
//!
//! Every refusal is a JSON body `{"error": "…"}` saying what to change. Connections are served
//! as HTTP/1.1 (upgrades to WebSocket included) by hyper; a connection's failure never affects
//! the accept loop, and accept errors (out of file descriptors) are retried after a pause.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep, timeout, timeout_at};
use tower::ServiceExt as _;

use crate::config::FaceLimits;
pub(crate) use crate::config::split_port;

/// Who may use a face.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// The API key this layer requires (`None`: not checked here, because none is configured or
    /// because the face checks credentials itself, as the JSON-RPC face does).
    pub api_key: Option<Arc<str>>,
    /// Paths answered to `GET`/`HEAD` without the key.
    pub public_paths: &'static [&'static str],
    /// Origins (`scheme://host[:port]`, lowercase) allowed besides the node's own pages.
    pub allowed_origins: Arc<[String]>,
    /// Host names (`name` or `name:port`, lowercase) that name the node besides loopback ones.
    pub allowed_hosts: Arc<[String]>,
    /// Port of the node's HTTP face: `http://<a name of the node>:<port>` is the node's own
    /// origin (pages it serves itself), allowed on every face.
    pub own_http_port: u16,
}

/// One face to serve: its name (for logs), its router, its limits and its access rules.
#[derive(Debug)]
pub struct Face {
    /// `agh`, `http` or `rpc`.
    pub name: &'static str,
    /// The face's routes.
    pub router: Router,
    /// Connection limits.
    pub limits: FaceLimits,
    /// Access rules.
    pub access: Access,
}

/// The address a request arrived on (a request extension set by the accept loop).
#[derive(Clone, Copy, Debug)]
struct Arrival {
    local: SocketAddr,
}

/// How long the accept loop pauses after an accept error (e.g. EMFILE).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// After a refusal, what the client still sends is read and discarded (for at most this long,
/// this many bytes, and until it has been quiet for [`LINGER_QUIET`]): closing a socket with
/// unread input resets it, which can destroy the answer in transit.
const LINGER_TIME: Duration = Duration::from_secs(1);
const LINGER_QUIET: Duration = Duration::from_millis(50);
const LINGER_BYTES: usize = 64 * 1024;
/// Largest request head (request line and headers), also hyper's read buffer; a larger head
/// is answered 431.
const MAX_HEAD: usize = 64 * 1024;

/// A JSON error answer, `{"error": message}`.
pub(crate) fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// Accepts connections on `listener` and serves `face` until `shutdown` completes; then stops
/// accepting, lets each connection finish its request in progress and returns when they have.
/// (WebSocket sessions, once upgraded, run on their own and end when their sockets close.)
pub async fn serve(listener: TcpListener, face: Face, shutdown: impl Future<Output = ()>) {
    let Face {
        name,
        router,
        limits,
        access,
    } = face;
    let checks = Arc::new(Checks { access, limits });
    let router = router.layer(axum::middleware::from_fn_with_state(
        Arc::clone(&checks),
        check_request,
    ));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = accept_loop(
        &listener,
        limits.max_connections,
        name,
        shutdown,
        |stream, remote, admitted| {
            let router = router.clone();
            let stop = stop_rx.clone();
            async move {
                match admitted {
                    Admitted::Within(slot) => {
                        let conn = Connection {
                            router,
                            limits,
                            slot,
                            stop,
                        };
                        conn.serve(stream, remote, name).await;
                    }
                    Admitted::Refused(permit) => {
                        refuse(stream, limits.header_timeout).await;
                        drop(permit);
                    }
                }
            }
        },
    )
    .await;
    drop(listener);
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
}

/// What [`accept_loop`] decided for an accepted connection; the permit is held for as long as the
/// connection (or its refusal) lasts.
pub(crate) enum Admitted {
    /// Within the connection limit: serve it.
    Within(OwnedSemaphorePermit),
    /// Beyond it, within as many refusals in progress: answer 503 and close.
    Refused(OwnedSemaphorePermit),
}

/// The accept loop of every face (the HTTP and WebSocket faces here, the AGTP face in
/// `agtp::listener`): until `shutdown` completes, at most `max` connections at once are
/// [`Admitted::Within`], as many more [`Admitted::Refused`], and the rest dropped unanswered;
/// `spawn` gives each its task. A failed accept (out of descriptors, say) backs off for
/// [`ACCEPT_BACKOFF`]. Returns the tasks still running, for the caller to drain or abort.
pub(crate) async fn accept_loop<F, Fut>(
    listener: &TcpListener,
    max: usize,
    face: &'static str,
    shutdown: impl Future<Output = ()>,
    mut spawn: F,
) -> JoinSet<()>
where
    F: FnMut(TcpStream, SocketAddr, Admitted) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let max = max.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let refusals = Arc::new(Semaphore::new(max));
    let mut tasks = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let mut backoff = false;
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done
                    && e.is_panic()
                {
                    tracing::warn!(face, error = %e, "connection task panicked");
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    if let Ok(slot) = Arc::clone(&slots).try_acquire_owned() {
                        tasks.spawn(spawn(stream, remote, Admitted::Within(slot)));
                    } else if let Ok(permit) = Arc::clone(&refusals).try_acquire_owned() {
                        tracing::debug!(face, %remote, "connection limit reached; answering 503");
                        tasks.spawn(spawn(stream, remote, Admitted::Refused(permit)));
                    } else {
                        tracing::debug!(face, %remote, "connection limit reached; dropped");
                    }
                }
                Err(e) => {
                    tracing::debug!(face, error = %e, "accept failed");
                    backoff = true;
                }
            },
        }
        if backoff {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
            }
        }
    }
    tasks
}

/// One accepted connection within the limit.
struct Connection {
    router: Router,
    limits: FaceLimits,
    slot: OwnedSemaphorePermit,
    stop: watch::Receiver<bool>,
}

impl Connection {
    async fn serve(self, stream: TcpStream, remote: SocketAddr, face: &'static str) {
        let Self {
            router,
            limits,
            slot,
            mut stop,
        } = self;
        let _ = stream.set_nodelay(true);
        let Ok(local) = stream.local_addr() else {
            return;
        };
        let io = Watched::new(stream, limits.request_timeout, slot);
        let idle = Arc::clone(&io.idle_ms);
        let upgraded = Arc::clone(&io.upgraded);
        let ws_idle_ms = millis(limits.ws_idle_timeout);
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(Arrival { local });
            let router = router.clone();
            let idle = Arc::clone(&idle);
            let upgraded = Arc::clone(&upgraded);
            async move {
                let response = router
                    .oneshot(request.map(axum::body::Body::new))
                    .await
                    .unwrap_or_else(|never: Infallible| match never {});
                if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    idle.store(ws_idle_ms, Ordering::Relaxed);
                    upgraded.store(true, Ordering::Relaxed);
                }
                Ok::<_, Infallible>(response)
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_header_size(MAX_HEAD)
            .max_buf_size(MAX_HEAD);
        let conn = builder
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        let mut conn = std::pin::pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            () = async { let _ = stop.wait_for(|stopped| *stopped).await; } => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(face, %remote, error = %e, "connection closed on an error");
        }
    }
}

/// How often the WebSocket faces ping their clients for an idle bound of `idle`: three pings per
/// bound, so that a client that answers pings (every WebSocket library does while it reads) is
/// never idle, whatever it sends itself.
#[must_use]
pub fn ws_ping_interval(idle: Duration) -> Duration {
    (idle / 3).max(Duration::from_millis(100))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Answers a connection beyond the limit with 503 and closes it.
async fn refuse(mut stream: TcpStream, limit: Duration) {
    let _ = stream.set_nodelay(true);
    let body = r#"{"error":"too many connections to this face; try again later"}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let written = timeout(limit, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.flush().await
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut discarded = 0usize;
    let until = Instant::now() + LINGER_TIME;
    while discarded < LINGER_BYTES {
        let quiet = Instant::now() + LINGER_QUIET;
        match timeout_at(until.min(quiet), stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => discarded += n,
            _ => break,
        }
    }
}

/// A connection's socket, with its slot and its idle timer: a read or write that has waited
/// while no byte moved either way for the idle bound fails with `TimedOut`. The bound starts at
/// the request timeout and becomes the WebSocket idle timeout when the connection upgrades; from
/// then on only bytes that arrive count (the faces ping their WebSocket clients every
/// [`ws_ping_interval`], so a live client answers in time and a silent one is closed).
struct Watched {
    io: TcpStream,
    idle_ms: Arc<AtomicU64>,
    upgraded: Arc<AtomicBool>,
    last: Instant,
    read_timer: Pin<Box<Sleep>>,
    write_timer: Pin<Box<Sleep>>,
    _slot: OwnedSemaphorePermit,
}

impl Watched {
    fn new(io: TcpStream, idle: Duration, slot: OwnedSemaphorePermit) -> Self {
        let now = Instant::now();
        Self {
            io,
            idle_ms: Arc::new(AtomicU64::new(millis(idle))),
            upgraded: Arc::new(AtomicBool::new(false)),
            last: now,
            read_timer: Box::pin(tokio::time::sleep_until(now + idle)),
            write_timer: Box::pin(tokio::time::sleep_until(now + idle)),
            _slot: slot,
        }
    }

    /// Whether the idle bound has passed; otherwise the timer is armed to wake `cx`.
    fn idle_expired(&mut self, write: bool, cx: &mut Context<'_>) -> bool {
        let idle = Duration::from_millis(self.idle_ms.load(Ordering::Relaxed));
        let deadline = self.last + idle;
        let timer = if write {
            &mut self.write_timer
        } else {
            &mut self.read_timer
        };
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        timer.as_mut().poll(cx).is_ready()
    }

    /// Notes progress, or turns a wait past the idle bound into an error.
    fn progress<T>(
        &mut self,
        polled: Poll<io::Result<T>>,
        moved: impl FnOnce(&T) -> bool,
        write: bool,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(Ok(v)) => {
                if moved(&v) && !(write && self.upgraded.load(Ordering::Relaxed)) {
                    self.last = Instant::now();
                }
                Poll::Ready(Ok(v))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if self.idle_expired(write, cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle for too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let after = buf.filled().len();
        self.progress(polled, |()| after > before, false, cx)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.progress(polled, |n| *n > 0, true, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.progress(polled, |n| *n > 0, true, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The per-request checks of one face.
#[derive(Debug)]
struct Checks {
    access: Access,
    limits: FaceLimits,
}

/// Host, then Origin, then the API key; then the request, within the request timeout.
async fn check_request(
    State(checks): State<Arc<Checks>>,
    mut request: Request,
    next: Next,
) -> Response {
    let local = request.extensions().get::<Arrival>().map(|a| a.local.ip());
    if let Err(refusal) = checks.access.admit(&request, local) {
        tracing::debug!(%refusal, uri = %request.uri(), "request refused");
        return refusal.into_response();
    }
    normalise_bearer(request.headers_mut());
    let limit = checks.limits.request_timeout;
    match timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let mut r = json_error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request was not received and answered within {} s",
                    limit.as_secs()
                ),
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            r
        }
    }
}

/// Why a request was refused before it reached the face.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum Refusal {
    /// No `Host` header (nor an absolute request target).
    #[error("a Host header is required")]
    NoHost,
    /// The Host is not a name of this node (DNS rebinding, or a misdirected request).
    #[error(
        "Host {0:?} does not name this node (localhost, a loopback or this node's address, or a \
         name in allowed_hosts)"
    )]
    Host(String),
    /// A browser page from an origin that is not allowed.
    #[error(
        "Origin {0:?} may not use this node: add it to allowed_origins to let pages from there in"
    )]
    Origin(String),
    /// No credentials.
    #[error(
        "an Authorization: Bearer <API key> header is required (the agora CLI sends the key \
         given with --api-key KEY or AGORA_API_KEY)"
    )]
    NoKey,
    /// Wrong credentials.
    #[error(
        "the API key is wrong (the agora CLI sends the key given with --api-key KEY or \
         AGORA_API_KEY)"
    )]
    WrongKey,
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Self::NoHost => StatusCode::BAD_REQUEST,
            Self::Host(_) => StatusCode::MISDIRECTED_REQUEST,
            Self::Origin(_) => StatusCode::FORBIDDEN,
            Self::NoKey | Self::WrongKey => StatusCode::UNAUTHORIZED,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut r = json_error(status, self.to_string());
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

impl Access {
    /// Checks a request's Host, Origin and credentials.
    fn admit(&self, request: &Request, local: Option<IpAddr>) -> Result<(), Refusal> {
        let headers = request.headers();
        let host = request
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| header_str(headers, &header::HOST).map(str::to_owned))
            .ok_or(Refusal::NoHost)?;
        if !self.names_node(&host, local) {
            return Err(Refusal::Host(host));
        }
        if let Some(origin) = header_str(headers, &header::ORIGIN)
            && (is_upgrade(headers) || !is_safe(request.method()))
            && !self.origin_allowed(origin, local)
        {
            return Err(Refusal::Origin(origin.to_owned()));
        }
        let Some(key) = &self.api_key else {
            return Ok(());
        };
        if is_safe(request.method()) && self.public_paths.contains(&request.uri().path()) {
            return Ok(());
        }
        match bearer(headers) {
            Some(token) if constant_time_eq(token.as_bytes(), key.as_bytes()) => Ok(()),
            Some(_) => Err(Refusal::WrongKey),
            None => Err(Refusal::NoKey),
        }
    }

    /// Whether `host` (`name[:port]`) names this node: `localhost`, a loopback or unspecified
    /// address, the address the request arrived on, or a configured name. (An IP literal cannot
    /// be rebound; a name other than `localhost` must be configured.)
    fn names_node(&self, host: &str, local: Option<IpAddr>) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let (name, _) = split_port(&host);
        let name = name.strip_suffix('.').unwrap_or(name);
        if name == "localhost" {
            return true;
        }
        let literal = name
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .unwrap_or(name);
        if let Ok(ip) = literal.parse::<IpAddr>()
            && (ip.is_loopback() || ip.is_unspecified() || Some(ip) == local)
        {
            return true;
        }
        self.allowed_hosts
            .iter()
            .any(|allowed| *allowed == host || allowed == name)
    }

    /// Whether a browser page from `origin` may open WebSockets and send changes: a configured
    /// origin, or the node's own HTTP face under one of its names.
    fn origin_allowed(&self, origin: &str, local: Option<IpAddr>) -> bool {
        let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        if self.allowed_origins.contains(&origin) {
            return true;
        }
        let Some(authority) = origin.strip_prefix("http://") else {
            return false;
        };
        let (_, port) = split_port(authority);
        port.unwrap_or(80) == self.own_http_port && self.names_node(authority, local)
    }
}

fn header_str<'h>(headers: &'h HeaderMap, name: &header::HeaderName) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `GET`, `HEAD` and `OPTIONS` change nothing.
fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    header_str(headers, &header::UPGRADE).is_some_and(|v| {
        v.split(',')
            .any(|p| p.trim().eq_ignore_ascii_case("websocket"))
    })
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = header_str(headers, &header::AUTHORIZATION)?.trim();
    let (scheme, token) = value.split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Rewrites `Authorization: <bearer in any case> <token>` as `Bearer <token>`, the form a face
/// that reads its own credentials (the JSON-RPC face) expects.
fn normalise_bearer(headers: &mut HeaderMap) {
    let Some(value) = bearer(headers).map(|token| format!("Bearer {token}")) else {
        return;
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(header::AUTHORIZATION, value);
    }
}

/// Compares secrets without stopping at the first difference.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        Access {
            api_key: Some("k".repeat(20).into()),
            public_paths: &["/status"],
            allowed_origins: vec!["https://app.example".to_owned()].into(),
            allowed_hosts: vec!["node.example".to_owned(), "alias.example:8080".to_owned()].into(),
            own_http_port: 4411,
        }
    }

    fn request(method: &str, uri: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = axum::http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(axum::body::Body::empty()).unwrap_or_default()
    }

    fn status(r: Result<(), Refusal>) -> u16 {
        r.map_or_else(|r| r.status().as_u16(), |()| 200)
    }

    #[test]
    fn hosts_name_the_node() {
        let a = access();
        let local = Some(IpAddr::from([10, 0, 0, 5]));
        for good in [
            "localhost",
            "LOCALHOST:4411",
            "127.0.0.1",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:4411",
            "10.0.0.5:4411",
            "node.example",
            "node.example:9",
            "alias.example:8080",
        ] {
            assert!(a.names_node(good, local), "{good}");
        }
        for bad in [
            "evil.example",
            "evil.example:4411",
            "10.0.0.6",
            "alias.example:8081",
            "localhost.evil.example",
            "",
        ] {
            assert!(!a.names_node(bad, local), "{bad}");
        }
    }

    #[test]
    fn origins_host_and_keys_are_checked_in_order() {
        let a = access();
        let key = format!("Bearer {}", "k".repeat(20));
        let lo = Some(IpAddr::from([127, 0, 0, 1]));
        let check = |method, uri, headers: &[(&str, &str)]| {
            status(a.admit(&request(method, uri, headers), lo))
        };
        assert_eq!(check("GET", "/status", &[("host", "evil.example")]), 421);
        assert_eq!(check("GET", "/x", &[]), 400);
        assert_eq!(check("GET", "/status", &[("host", "localhost:4411")]), 200);
        assert_eq!(check("GET", "/peers", &[("host", "localhost")]), 401);
        let lower = format!("bearer  {}", "k".repeat(20));
        assert_eq!(
            check(
                "GET",
                "/peers",
                &[("host", "localhost"), ("authorization", &lower)]
            ),
            200
        );
        assert_eq!(
            check(
                "GET",
                "/peers",
                &[("host", "localhost"), ("authorization", "Bearer nope")]
            ),
            401
        );
        let post = |origin| {
            check(
                "POST",
                "/agh/v0/envelopes",
                &[
                    ("host", "localhost"),
                    ("authorization", &key),
                    ("origin", origin),
                ],
            )
        };
        assert_eq!(post("http://evil.example"), 403);
        assert_eq!(post("null"), 403);
        assert_eq!(post("https://app.example"), 200);
        assert_eq!(post("http://localhost:4411"), 200, "the node's own pages");
        assert_eq!(post("http://127.0.0.1:4411/"), 200);
        assert_eq!(post("http://localhost:4412"), 403);
        assert_eq!(post("http://evil.example:4411"), 403);
        // A cross-origin read is the browser's to refuse (no CORS headers); an upgrade is ours.
        let get = |extra: &[(&str, &str)]| {
            let mut h = vec![("host", "localhost"), ("authorization", key.as_str())];
            h.extend_from_slice(extra);
            check("GET", "/", &h)
        };
        assert_eq!(get(&[("origin", "http://evil.example")]), 200);
        assert_eq!(
            get(&[("origin", "http://evil.example"), ("upgrade", "websocket")]),
            403
        );
    }

    #[test]
    fn ports_split_off_names() {
        assert_eq!(split_port("a.b:80"), ("a.b", Some(80)));
        assert_eq!(split_port("a.b"), ("a.b", None));
        assert_eq!(split_port("[::1]:9"), ("[::1]", Some(9)));
        assert_eq!(split_port("[::1]"), ("[::1]", None));
        assert_eq!(split_port("::1"), ("::1", None));
        assert_eq!(split_port("a:x"), ("a", None));
    }
}
