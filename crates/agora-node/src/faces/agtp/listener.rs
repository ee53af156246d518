//! The AGTP listener: accepts TCP connections (plain, or TLS 1.3 with [`ListenerConfig::tls`]),
//! reads AGTP/1.0 requests and hands them, one at a time, to a [`Handler`].
//!
//! What this module owns (AGTP base draft, TCP/TLS binding, as summarised in the research notes
//! §1.2):
//!
//! - **Sequential request/response per connection.** Requests are decoded with
//!   [`agora_agtp::codec::decode_request`] and answered strictly in order; bytes of pipelined
//!   requests stay buffered until the current response has been written.
//! - **Framing errors** end the connection: the server answers 400 (the codec's error body, with
//!   `Connection: close`) and closes, since the stream cannot be resynchronised.
//! - **Session inactivity timeout** ([`ListenerConfig::idle_timeout`], 60 s by default, the
//!   draft's default and minimum): a connection that has not delivered a complete request within
//!   it, counted from the accept (the end of the TLS handshake) or from the last response, is
//!   closed without an answer. A slow sender does not extend it.
//! - **`Connection: close`** on a request closes the connection after its response; EOF closes it.
//! - **TLS**: the handshake must finish within [`ListenerConfig::handshake_timeout`]. Whether a
//!   listener must use TLS (everything off loopback, per the draft) is the caller's decision.
//! - **Load**: at most [`ListenerConfig::max_connections`] connections are served at once; a
//!   connection beyond that is answered 503 and closed.
//! - **`Server-ID` and `Response-ID`** (base draft -09: MUST on every response) are added to
//!   every response this listener writes (the handler's, the 400 for a framing error, the 503
//!   refusal) unless the handler set them: `Server-ID` is [`ListenerConfig::server_id`],
//!   `Response-ID` is `resp-` and 16 hex digits, distinct for every response of the listener
//!   (a random per-listener offset plus a counter, spread by an odd multiplier).
//!
//! A connection's failure never affects another connection or the accept loop; accept errors
//! (e.g. out of file descriptors) are logged and retried after a short pause. Every connection
//! runs in its own task; [`serve`] returns once its `shutdown` future completes, dropping the
//! listening socket and every connection still open.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agora_agtp::codec::{Limits, Request, Response, decode_request};
use agora_agtp::{AgtpError, BadRequest};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, timeout, timeout_at};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::faces::serve::Admitted;

/// Answers AGTP requests.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request. `remote` is the caller's socket address.
    fn handle(&self, request: Request, remote: SocketAddr)
    -> impl Future<Output = Response> + Send;
}

/// How a listener serves its connections.
#[derive(Clone)]
pub struct ListenerConfig {
    /// How long a connection may go without a complete request, counted from the accept or the
    /// last response (AGTP session inactivity timeout). Default 60 s.
    pub idle_timeout: Duration,
    /// How long the TLS handshake may take. Default 10 s.
    pub handshake_timeout: Duration,
    /// Codec limits on the request head and body.
    pub limits: Limits,
    /// Connections served at once; further connections are answered 503 and closed. Default 1024.
    pub max_connections: usize,
    /// TLS 1.3 acceptor ([`super::tls::ServerTls::acceptor`]); `None` serves plain AGTP.
    pub tls: Option<TlsAcceptor>,
    /// The `Server-ID` sent on every response. Default `agora`.
    pub server_id: String,
    /// What an HTTP client is told, in the message of the AGTP 400 it gets
    /// ([`crate::faces::wrong_face::Faces::http_on_agtp`]); `None` adds nothing.
    pub http_hint: Option<String>,
}

/// Stamps `Server-ID` and `Response-ID` on the listener's responses.
#[derive(Debug)]
struct Stamp {
    server_id: String,
    offset: u64,
    next: AtomicU64,
}

impl Stamp {
    fn new(server_id: &str) -> Self {
        let mut seed = [0u8; 8];
        // Distinctness within the listener comes from the counter; the random offset only keeps
        // two listeners (or restarts) from numbering alike. Without randomness, the clock.
        let offset = match getrandom::fill(&mut seed) {
            Ok(()) => u64::from_le_bytes(seed),
            Err(_) => crate::clock::now_ms(),
        };
        Self {
            server_id: server_id.to_owned(),
            offset,
            next: AtomicU64::new(0),
        }
    }

    fn apply(&self, response: &mut Response) {
        if !response.headers.contains("Server-ID") {
            response.headers.insert("Server-ID", &self.server_id);
        }
        if !response.headers.contains("Response-ID") {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            // n ↦ offset + n·odd is a bijection on u64: no two responses share an id.
            let id = self
                .offset
                .wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            response
                .headers
                .insert("Response-ID", format!("resp-{id:016x}"));
        }
    }
}

impl Default for ListenerConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(60),
            handshake_timeout: Duration::from_secs(10),
            limits: Limits::default(),
            max_connections: 1024,
            tls: None,
            server_id: "agora".into(),
            http_hint: None,
        }
    }
}

impl fmt::Debug for ListenerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerConfig")
            .field("idle_timeout", &self.idle_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("limits", &self.limits)
            .field("max_connections", &self.max_connections)
            .field("tls", &self.tls.is_some())
            .field("server_id", &self.server_id)
            .field("http_hint", &self.http_hint)
            .finish()
    }
}

/// After answering 400 or 503, input the peer still sends is discarded (for at most
/// `LINGER_TIME` and `LINGER_BYTES`, and until it has been quiet for `LINGER_QUIET`) before the
/// socket is dropped: closing with unread input would reset the connection and could destroy the
/// answer in transit.
const LINGER_TIME: Duration = Duration::from_secs(1);
const LINGER_QUIET: Duration = Duration::from_millis(50);
const LINGER_BYTES: usize = 256 * 1024;

/// Read buffer: grown by at least this much before a read; shrunk back when idle.
const READ_CHUNK: usize = 8 * 1024;
const KEEP_CAPACITY: usize = 64 * 1024;

/// Accepts connections on `listener` and serves them with `handler` until `shutdown` completes.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    config: ListenerConfig,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let stamp = Arc::new(Stamp::new(&config.server_id));
    let config = Arc::new(config);
    let max = config.max_connections;
    let mut tasks = crate::faces::serve::accept_loop(
        &listener,
        max,
        "agtp",
        shutdown,
        |stream, remote, admitted| {
            let config = Arc::clone(&config);
            let handler = Arc::clone(&handler);
            let stamp = Arc::clone(&stamp);
            async move {
                match admitted {
                    Admitted::Within(permit) => {
                        connection(stream, remote, &config, &stamp, &*handler).await;
                        drop(permit);
                    }
                    Admitted::Refused(permit) => {
                        refuse(stream, remote, &config, &stamp).await;
                        drop(permit);
                    }
                }
            }
        },
    )
    .await;
    drop(listener);
    tasks.shutdown().await;
}

/// A stream a connection is served over.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {
    /// Queues a TLS close_notify (nothing for plain TCP); the next flush sends it.
    fn close_notify(&mut self) {}
}

impl Stream for TcpStream {}

impl Stream for TlsStream<TcpStream> {
    fn close_notify(&mut self) {
        self.get_mut().1.send_close_notify();
    }
}

async fn connection<H: Handler>(
    stream: TcpStream,
    remote: SocketAddr,
    config: &ListenerConfig,
    stamp: &Stamp,
    handler: &H,
) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%remote, error = %e, "AGTP: cannot set TCP_NODELAY");
    }
    let result = match &config.tls {
        None => session(stream, remote, config, stamp, handler).await,
        Some(acceptor) => match timeout(config.handshake_timeout, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => session(tls, remote, config, stamp, handler).await,
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        },
    };
    if let Err(e) = result {
        tracing::debug!(%remote, error = %e, "AGTP connection closed on an error");
    }
}

/// Serves requests on one connection until it closes.
async fn session<S: Stream, H: Handler>(
    mut io: S,
    remote: SocketAddr,
    config: &ListenerConfig,
    stamp: &Stamp,
    handler: &H,
) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut start = 0usize;
    let mut out: Vec<u8> = Vec::new();
    let mut deadline = Instant::now() + config.idle_timeout;
    loop {
        match decode_request(&buf[start..], &config.limits) {
            Ok(Some((request, consumed))) => {
                start += consumed;
                let close = wants_close(&request);
                let mut response = handler.handle(request, remote).await;
                stamp.apply(&mut response);
                out.clear();
                response.encode_into(&mut out);
                write(&mut io, &out, config.idle_timeout).await?;
                if close {
                    return close_quietly(&mut io).await;
                }
                deadline = Instant::now() + config.idle_timeout;
            }
            Ok(None) => {
                if start > 0 {
                    buf.drain(..start);
                    start = 0;
                }
                if buf.is_empty() && buf.capacity() > KEEP_CAPACITY {
                    buf.shrink_to(READ_CHUNK);
                }
                buf.reserve(READ_CHUNK);
                match timeout_at(deadline, io.read_buf(&mut buf)).await {
                    Err(_) => {
                        tracing::debug!(%remote, "AGTP connection idle; closed");
                        return close_quietly(&mut io).await;
                    }
                    Ok(Ok(0)) => return Ok(()),
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(e),
                }
            }
            Err(e) => {
                // An HTTP client at the AGTP port: the AGTP 400 the drafts prescribe
                // (`invalid-wire-format`), its message naming the HTTP face.
                let e = match (&config.http_hint, e) {
                    (Some(hint), BadRequest::StartLine(detail))
                        if start == 0 && crate::faces::wrong_face::is_http_request(&buf) =>
                    {
                        BadRequest::StartLine(format!("{detail}; {hint}"))
                    }
                    (_, e) => e,
                };
                tracing::debug!(%remote, error = %e, "AGTP request malformed; answering 400");
                let mut response = bad_request(e);
                stamp.apply(&mut response);
                return answer_and_close(&mut io, &response, config.idle_timeout).await;
            }
        }
    }
}

/// Whether the request's `Connection` field lists `close`.
fn wants_close(request: &Request) -> bool {
    request.headers.get_all("Connection").any(|value| {
        value.split(',').any(|token| {
            token
                .trim_matches([' ', '\t'])
                .eq_ignore_ascii_case("close")
        })
    })
}

fn bad_request(error: BadRequest) -> Response {
    Response::from_error(&AgtpError::BadRequest(error), None).with_header("Connection", "close")
}

/// Answers a connection beyond the limit with 503 and closes it.
async fn refuse(mut stream: TcpStream, remote: SocketAddr, config: &ListenerConfig, stamp: &Stamp) {
    let _ = stream.set_nodelay(true);
    let mut response = Response::from_error(
        &AgtpError::Unavailable("too many connections; try again later".into()),
        None,
    )
    .with_header("Connection", "close");
    stamp.apply(&mut response);
    let limit = config.handshake_timeout;
    let result = match &config.tls {
        None => answer_and_close(&mut stream, &response, limit).await,
        Some(acceptor) => match timeout(limit, acceptor.accept(stream)).await {
            Ok(Ok(mut tls)) => answer_and_close(&mut tls, &response, limit).await,
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        },
    };
    if let Err(e) = result {
        tracing::debug!(%remote, error = %e, "AGTP refusal not delivered");
    }
}

/// Writes `response`, then closes after discarding what the peer still sends for a moment.
async fn answer_and_close<S: Stream>(
    io: &mut S,
    response: &Response,
    limit: Duration,
) -> io::Result<()> {
    write(io, &response.encode(), limit).await?;
    close_quietly(io).await?;
    let mut sink = [0u8; 4096];
    let mut discarded = 0usize;
    let until = Instant::now() + LINGER_TIME;
    while discarded < LINGER_BYTES {
        let quiet = Instant::now() + LINGER_QUIET;
        match timeout_at(until.min(quiet), io.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => discarded += n,
            _ => break,
        }
    }
    Ok(())
}

/// Sends a TLS close_notify where there is TLS. No TCP half-close: the socket is simply dropped.
async fn close_quietly<S: Stream>(io: &mut S) -> io::Result<()> {
    io.close_notify();
    io.flush().await
}

/// Writes and flushes `bytes` within `limit` (a peer that does not read cannot hold the task).
async fn write<S: Stream>(io: &mut S, bytes: &[u8], limit: Duration) -> io::Result<()> {
    let written = timeout(limit, async {
        io.write_all(bytes).await?;
        io.flush().await
    })
    .await;
    written.unwrap_or_else(|_| {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "AGTP response not written in time",
        ))
    })
}

/// An AGTP handler whose requests are counted.
pub struct CountedAgtp<H>(pub H, pub Arc<crate::telemetry::Telemetry>);

impl<H> fmt::Debug for CountedAgtp<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountedAgtp").finish_non_exhaustive()
    }
}

impl<H: Handler> Handler for CountedAgtp<H> {
    fn handle(
        &self,
        request: Request,
        remote: SocketAddr,
    ) -> impl Future<Output = Response> + Send {
        let method = request.method.clone();
        let started = std::time::Instant::now();
        let telemetry = Arc::clone(&self.1);
        let answer = self.0.handle(request, remote);
        async move {
            let response = answer.await;
            telemetry.agtp_request(&method, response.status.0, started.elapsed());
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use agora_agtp::Status;
    use agora_agtp::codec::decode_response;
    use serde_json::json;
    use tokio::sync::oneshot;

    use super::*;
    use crate::faces::agtp::client::{ClientError, Connection, Transport, request};
    use crate::faces::agtp::tls::{self, Roots};

    const T: Duration = Duration::from_secs(5);

    /// Answers 200 with `{"method": …, "body": …}`.
    #[derive(Debug)]
    struct Echo;

    impl Handler for Echo {
        async fn handle(&self, request: Request, _remote: SocketAddr) -> Response {
            let body = String::from_utf8_lossy(&request.body).into_owned();
            Response::new(Status::OK).with_json_body(&json!({
                "method": request.method,
                "body": body,
            }))
        }
    }

    /// A running listener; dropping it shuts the listener down.
    struct Server {
        addr: SocketAddr,
        stop: Option<oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Server {
        async fn start(config: ListenerConfig) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("local addr");
            let (stop, stopped) = oneshot::channel::<()>();
            let task = tokio::spawn(serve(listener, config, Arc::new(Echo), async move {
                let _ = stopped.await;
            }));
            Self {
                addr,
                stop: Some(stop),
                task,
            }
        }

        async fn stop(mut self) {
            if let Some(stop) = self.stop.take() {
                let _ = stop.send(());
            }
            (&mut self.task).await.expect("serve task");
        }
    }

    fn echo_of(response: &Response) -> serde_json::Value {
        assert_eq!(response.status, Status::OK, "{response:?}");
        response.json_body().expect("json").expect("body")
    }

    fn post(body: &str) -> Request {
        Request::new("ECHO")
            .with_target("/echo")
            .with_body(body.to_owned(), "text/plain")
    }

    /// Reads one response from a raw socket (bytes after it are returned too).
    async fn read_response(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Response> {
        loop {
            if let Some((response, n)) =
                decode_response(buf, &Limits::default()).expect("well-formed response")
            {
                buf.drain(..n);
                return Some(response);
            }
            let n = timeout(T, socket.read_buf(buf))
                .await
                .expect("response in time")
                .expect("read");
            if n == 0 {
                return None;
            }
        }
    }

    /// Asserts the server closes the socket (EOF or reset) within `within`.
    async fn assert_closed(socket: &mut TcpStream, within: Duration) {
        let mut rest = Vec::new();
        let read = timeout(within, socket.read_to_end(&mut rest))
            .await
            .expect("closed in time");
        if let Ok(n) = read {
            assert_eq!(
                n,
                0,
                "unexpected bytes: {:?}",
                String::from_utf8_lossy(&rest)
            );
        }
    }

    #[tokio::test]
    async fn sequential_requests_on_one_connection() {
        let server = Server::start(ListenerConfig::default()).await;
        let mut conn = Connection::connect(&server.addr.to_string(), &Transport::Plain, T)
            .await
            .expect("connect");
        let first = conn.send(&post("one"), T).await.expect("first");
        assert_eq!(echo_of(&first), json!({"method": "ECHO", "body": "one"}));
        let second = conn
            .send(&Request::new("discover"), T)
            .await
            .expect("second");
        assert_eq!(echo_of(&second), json!({"method": "DISCOVER", "body": ""}));
        server.stop().await;
    }

    #[tokio::test]
    async fn pipelined_requests_are_answered_in_order() {
        let server = Server::start(ListenerConfig::default()).await;
        let mut socket = TcpStream::connect(server.addr).await.expect("connect");
        let mut wire = Vec::new();
        for body in ["a", "b", "c"] {
            post(body).encode_into(&mut wire);
        }
        socket.write_all(&wire).await.expect("write");
        let mut buf = Vec::new();
        let mut ids = std::collections::HashSet::new();
        for body in ["a", "b", "c"] {
            let response = read_response(&mut socket, &mut buf)
                .await
                .expect("response");
            assert_eq!(echo_of(&response)["body"], body);
            // Every response carries Server-ID and its own Response-ID.
            assert_eq!(response.headers.get("Server-ID"), Some("agora"));
            let id = response.headers.get("Response-ID").expect("Response-ID");
            assert!(id.starts_with("resp-") && id.len() == 21, "{id}");
            assert!(ids.insert(id.to_owned()), "{id} repeated");
        }
        assert!(buf.is_empty());
        // Split across writes, byte by byte, the next one still works.
        let wire = post("d").encode();
        for byte in &wire {
            socket.write_all(&[*byte]).await.expect("write");
        }
        let response = read_response(&mut socket, &mut buf)
            .await
            .expect("response");
        assert_eq!(echo_of(&response)["body"], "d");
        server.stop().await;
    }

    #[tokio::test]
    async fn malformed_request_line_gets_400_and_close() {
        let server = Server::start(ListenerConfig::default()).await;
        let mut socket = TcpStream::connect(server.addr).await.expect("connect");
        socket
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let mut buf = Vec::new();
        let response = read_response(&mut socket, &mut buf).await.expect("400");
        assert_eq!(response.status, Status::BAD_REQUEST);
        let body = response.json_body().expect("json").expect("body");
        // The newer base draft's code, Agora's draft-era one beside it.
        assert_eq!(body["error"]["code"], "invalid-wire-format");
        assert_eq!(body["error"]["draft_code"], "malformed-request-line");
        assert_eq!(response.headers.get("Server-ID"), Some("agora"));
        assert!(response.headers.contains("Response-ID"));
        assert_closed(&mut socket, T).await;
        server.stop().await;
    }

    #[tokio::test]
    async fn oversized_head_gets_400() {
        let server = Server::start(ListenerConfig::default()).await;
        let mut socket = TcpStream::connect(server.addr).await.expect("connect");
        let mut wire = b"AGTP/1.0 DISCOVER\r\nX-Pad: ".to_vec();
        wire.resize(Limits::DEFAULT_MAX_HEAD + 4096, b'a');
        wire.extend_from_slice(b"\r\n\r\n");
        socket.write_all(&wire).await.expect("write");
        let mut buf = Vec::new();
        let response = read_response(&mut socket, &mut buf).await.expect("400");
        assert_eq!(response.status, Status::BAD_REQUEST);
        assert_closed(&mut socket, T).await;
        server.stop().await;
    }

    #[tokio::test]
    async fn idle_connections_are_closed() {
        let idle = Duration::from_millis(200);
        let server = Server::start(ListenerConfig {
            idle_timeout: idle,
            ..ListenerConfig::default()
        })
        .await;
        // Silent from the start.
        let mut socket = TcpStream::connect(server.addr).await.expect("connect");
        let started = std::time::Instant::now();
        assert_closed(&mut socket, T).await;
        assert!(started.elapsed() >= idle.saturating_sub(Duration::from_millis(50)));
        // Silent after a response; a partial request does not extend the deadline.
        let mut socket = TcpStream::connect(server.addr).await.expect("connect");
        socket.write_all(&post("x").encode()).await.expect("write");
        let mut buf = Vec::new();
        read_response(&mut socket, &mut buf)
            .await
            .expect("response");
        socket.write_all(b"AGTP/1.0 ECH").await.expect("write");
        assert_closed(&mut socket, T).await;
        server.stop().await;
    }

    #[tokio::test]
    async fn connection_close_and_eof() {
        let server = Server::start(ListenerConfig::default()).await;
        let mut socket = TcpStream::connect(server.addr).await.expect("connect");
        let mut wire = post("last")
            .with_header("Connection", "keep-alive, Close")
            .encode();
        post("never").encode_into(&mut wire);
        socket.write_all(&wire).await.expect("write");
        let mut buf = Vec::new();
        let response = read_response(&mut socket, &mut buf)
            .await
            .expect("response");
        assert_eq!(echo_of(&response)["body"], "last");
        assert!(buf.is_empty());
        assert_closed(&mut socket, T).await;
        // A client that sends nothing and closes: the server's task ends, another still works.
        drop(TcpStream::connect(server.addr).await.expect("connect"));
        let response = request(&server.addr.to_string(), &Transport::Plain, &post("ok"), T)
            .await
            .expect("request");
        assert_eq!(echo_of(&response)["body"], "ok");
        server.stop().await;
    }

    #[tokio::test]
    async fn beyond_max_connections_503() {
        let server = Server::start(ListenerConfig {
            max_connections: 1,
            ..ListenerConfig::default()
        })
        .await;
        let addr = server.addr.to_string();
        let mut first = Connection::connect(&addr, &Transport::Plain, T)
            .await
            .expect("connect");
        // The first connection is being served once it has been answered.
        echo_of(&first.send(&post("1"), T).await.expect("first"));
        let refused = request(&addr, &Transport::Plain, &post("2"), T)
            .await
            .expect("answered");
        assert_eq!(refused.status, Status::UNAVAILABLE);
        assert!(refused.headers.contains("Server-ID") && refused.headers.contains("Response-ID"));
        drop(first);
        // The slot is freed when the first connection's task ends; it notices the EOF promptly.
        let deadline = Instant::now() + T;
        loop {
            // A refusal still lingering may make the listener drop this one unanswered.
            if let Ok(response) = request(&addr, &Transport::Plain, &post("3"), T).await
                && response.status == Status::OK
            {
                break;
            }
            assert!(Instant::now() < deadline, "slot never freed");
            tokio::task::yield_now().await;
        }
        server.stop().await;
    }

    #[tokio::test]
    async fn after_shutdown_connections_are_not_served() {
        let server = Server::start(ListenerConfig::default()).await;
        let addr = server.addr.to_string();
        let mut open = Connection::connect(&addr, &Transport::Plain, T)
            .await
            .expect("connect");
        echo_of(&open.send(&post("before"), T).await.expect("before"));
        server.stop().await;
        // The listening socket is closed: new connects are refused.
        let err = Connection::connect(&addr, &Transport::Plain, T)
            .await
            .expect_err("refused");
        assert!(matches!(err, ClientError::Connect { .. }), "{err}");
        // The connection that was open has been dropped.
        let err = open.send(&post("after"), T).await.expect_err("dropped");
        assert!(
            matches!(err, ClientError::Closed | ClientError::Io(_)),
            "{err}"
        );
    }

    // ---- TLS ----

    async fn tls_server() -> (tempfile::TempDir, tls::ServerTls, Server) {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = tls::load_or_generate(dir.path(), &[]).expect("certificate");
        let server = Server::start(ListenerConfig {
            tls: Some(cert.acceptor().expect("acceptor")),
            ..ListenerConfig::default()
        })
        .await;
        (dir, cert, server)
    }

    fn tls_transport(cert: &tls::ServerTls, server_name: &str) -> Transport {
        Transport::Tls {
            config: tls::client_config(&Roots::Pem(cert.cert_pem().into_bytes()))
                .expect("client config"),
            server_name: server_name.to_owned(),
        }
    }

    #[tokio::test]
    async fn tls_with_the_generated_certificate() {
        let (_dir, cert, server) = tls_server().await;
        let port = server.addr.port();
        for (addr, name) in [
            (format!("localhost:{port}"), "localhost"),
            (format!("127.0.0.1:{port}"), "127.0.0.1"),
        ] {
            let transport = tls_transport(&cert, name);
            let mut conn = Connection::connect(&addr, &transport, T)
                .await
                .expect("TLS connect");
            for body in ["one", "two"] {
                let response = conn.send(&post(body), T).await.expect("TLS request");
                assert_eq!(echo_of(&response)["body"], body);
            }
        }
        // for_host picks TLS when forced, with the host as the server name.
        let roots = Roots::Pem(cert.cert_pem().into_bytes());
        let transport = Transport::for_host("127.0.0.1", true, false, &roots).expect("transport");
        let response = request(&server.addr.to_string(), &transport, &post("forced"), T)
            .await
            .expect("forced TLS");
        assert_eq!(echo_of(&response)["body"], "forced");
        server.stop().await;
    }

    #[tokio::test]
    async fn tls_client_trusting_another_certificate_fails() {
        let (_dir, _cert, server) = tls_server().await;
        let other_dir = tempfile::tempdir().expect("tempdir");
        let other = tls::load_or_generate(other_dir.path(), &[]).expect("other certificate");
        let err = Connection::connect(
            &server.addr.to_string(),
            &tls_transport(&other, "localhost"),
            T,
        )
        .await
        .expect_err("untrusted");
        assert!(matches!(err, ClientError::Tls(_)), "{err}");
        assert!(err.to_string().contains("certificate"), "{err}");
        // And a name the certificate does not cover.
        let (_dir2, cert, server2) = tls_server().await;
        let err = Connection::connect(
            &server2.addr.to_string(),
            &tls_transport(&cert, "ans.example.org"),
            T,
        )
        .await
        .expect_err("wrong name");
        assert!(matches!(err, ClientError::Tls(_)), "{err}");
        server.stop().await;
        server2.stop().await;
    }

    #[tokio::test]
    async fn plain_client_to_tls_server_fails_cleanly() {
        let (_dir, _cert, server) = tls_server().await;
        let short = Duration::from_secs(2);
        let started = std::time::Instant::now();
        let err = request(
            &server.addr.to_string(),
            &Transport::Plain,
            &post("plain"),
            short,
        )
        .await
        .expect_err("plain to TLS");
        assert!(started.elapsed() < short + Duration::from_secs(1));
        assert!(
            matches!(
                err,
                ClientError::Malformed(_) | ClientError::Closed | ClientError::Io(_)
            ),
            "{err}"
        );
        server.stop().await;
    }

    #[tokio::test]
    async fn tls_client_to_plain_server_fails_cleanly() {
        let server = Server::start(ListenerConfig::default()).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = tls::load_or_generate(dir.path(), &[]).expect("certificate");
        let err = Connection::connect(
            &server.addr.to_string(),
            &tls_transport(&cert, "localhost"),
            T,
        )
        .await
        .expect_err("TLS to plain");
        assert!(matches!(err, ClientError::Tls(_)), "{err}");
        server.stop().await;
    }

    #[tokio::test]
    async fn tls12_only_client_is_refused() {
        use tokio_rustls::rustls;
        let (_dir, cert, server) = tls_server().await;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.chain()[0].clone()).expect("root");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS12])
        .expect("TLS 1.2 config")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let transport = Transport::Tls {
            config: Arc::new(config),
            server_name: "localhost".into(),
        };
        let err = Connection::connect(&server.addr.to_string(), &transport, T)
            .await
            .expect_err("TLS 1.2 refused");
        assert!(matches!(err, ClientError::Tls(_)), "{err}");
        server.stop().await;
    }

    #[tokio::test]
    async fn tls_handshake_timeout_closes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = tls::load_or_generate(dir.path(), &[]).expect("certificate");
        let server = Server::start(ListenerConfig {
            tls: Some(cert.acceptor().expect("acceptor")),
            handshake_timeout: Duration::from_millis(200),
            ..ListenerConfig::default()
        })
        .await;
        let mut socket = TcpStream::connect(server.addr).await.expect("connect");
        assert_closed(&mut socket, T).await;
        server.stop().await;
    }
}
