//! Outgoing AGTP/1.0 requests over TCP, plain or TLS 1.3: used for index refresh, federation and
//! the command line.
//!
//! What this module owns (AGTP base draft, TCP/TLS binding, as summarised in the research notes
//! §1.2):
//!
//! - **Transport choice** ([`Transport::for_host`]): TLS 1.3 (ALPN `agtp`, SNI = the host) unless
//!   the host is loopback; plain AGTP on loopback, or anywhere when explicitly insecure.
//! - **Framing**: a request is written whole, its response is read by `Content-Length` with the
//!   codec's default [`Limits`]; responses on one [`Connection`] come back in request order and
//!   bytes after a response stay buffered for the next one.
//! - **No socket half-close**: the client never shuts down its write side before reading (the
//!   binding forbids it); a connection is closed by dropping it.
//! - **Deadlines**: connecting (TCP and TLS handshake) and each request/response exchange are
//!   bounded by a caller-given timeout. After a failed or timed-out exchange a connection is
//!   unusable (a late response would be taken for the next one's).

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use agora_agtp::BadRequest;
use agora_agtp::codec::{Limits, Request, Response, decode_response};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;

use super::tls::{Roots, TlsError, client_config};

/// How to reach an AGTP server.
#[derive(Clone)]
pub enum Transport {
    /// Plain AGTP over TCP (loopback, or explicitly insecure).
    Plain,
    /// AGTP over TLS 1.3.
    Tls {
        /// The client configuration ([`super::tls::client_config`]).
        config: Arc<rustls::ClientConfig>,
        /// The name the certificate must cover and the SNI sent: a DNS name or an IP literal.
        server_name: String,
    },
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Plain => f.write_str("Plain"),
            Self::Tls { server_name, .. } => f
                .debug_struct("Tls")
                .field("server_name", server_name)
                .finish_non_exhaustive(),
        }
    }
}

impl Transport {
    /// The default for `host`: plain AGTP when host is a loopback address or `localhost`, TLS otherwise; `force_tls` / `insecure` override (insecure = plain even off loopback).
    ///
    /// `force_tls` wins over `insecure` when both are set. An IPv6 host may be given with or
    /// without brackets; the TLS server name is the host without them.
    pub fn for_host(
        host: &str,
        force_tls: bool,
        insecure: bool,
        roots: &Roots,
    ) -> Result<Self, TlsError> {
        let host = unbracket(host);
        if !force_tls && (insecure || is_loopback(host)) {
            return Ok(Self::Plain);
        }
        Ok(Self::Tls {
            config: client_config(roots)?,
            server_name: host.to_owned(),
        })
    }
}

fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

fn is_loopback(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// An AGTP request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not `host:port`.
    #[error("invalid AGTP address {addr:?}: {reason}")]
    Address {
        /// The address as given.
        addr: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The TCP connection could not be made.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address as given.
        addr: String,
        /// Cause.
        source: io::Error,
    },
    /// The TLS handshake failed (untrusted certificate, wrong name, no TLS 1.3, …).
    #[error("TLS with {0}")]
    Tls(String),
    /// Reading or writing failed.
    #[error("AGTP connection: {0}")]
    Io(#[from] io::Error),
    /// The operation did not finish in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server closed the connection before a whole response arrived.
    #[error("the AGTP server closed the connection before a complete response")]
    Closed,
    /// The server's bytes are not an AGTP/1.0 response.
    #[error("malformed AGTP response: {0}")]
    Malformed(BadRequest),
}

/// The byte stream under a [`Connection`].
enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Read buffer growth per read.
const READ_CHUNK: usize = 8 * 1024;

/// One AGTP connection: requests are sent one at a time, each answered before the next is sent.
pub struct Connection {
    io: Io,
    addr: String,
    /// Received bytes; `buf[start..]` are not yet consumed.
    buf: Vec<u8>,
    start: usize,
    out: Vec<u8>,
    limits: Limits,
    /// False after an exchange failed midway: the stream's position is unknown.
    usable: bool,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .field("tls", &matches!(self.io, Io::Tls(_)))
            .field("buffered", &(self.buf.len() - self.start))
            .field("usable", &self.usable)
            .finish()
    }
}

impl Connection {
    /// Connects to `addr` (`host:port`, IPv6 as `[::1]:4480`) and, for [`Transport::Tls`],
    /// completes the TLS handshake, all within `timeout`.
    pub async fn connect(
        addr: &str,
        transport: &Transport,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let (host, port) = split_host_port(addr)?;
        let connecting = async {
            let tcp = TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|source| ClientError::Connect {
                    addr: addr.to_owned(),
                    source,
                })?;
            // Requests are written whole; Nagle would only delay them.
            let _ = tcp.set_nodelay(true);
            match transport {
                Transport::Plain => Ok::<_, ClientError>(Io::Plain(tcp)),
                Transport::Tls {
                    config,
                    server_name,
                } => {
                    let name = ServerName::try_from(unbracket(server_name).to_owned())
                        .map_err(|e| ClientError::Tls(format!("{addr}: {server_name:?}: {e}")))?;
                    let tls = TlsConnector::from(Arc::clone(config))
                        .connect(name, tcp)
                        .await
                        .map_err(|e| ClientError::Tls(format!("{addr}: {e}")))?;
                    Ok(Io::Tls(Box::new(tls)))
                }
            }
        };
        let io = tokio::time::timeout(timeout, connecting)
            .await
            .map_err(|_| ClientError::Timeout(timeout))??;
        Ok(Self {
            io,
            addr: addr.to_owned(),
            buf: Vec::with_capacity(READ_CHUNK),
            start: 0,
            out: Vec::new(),
            limits: Limits::default(),
            usable: true,
        })
    }

    /// Sends one request and reads its response (Content-Length framing, default Limits), all within `timeout`.
    pub async fn send(
        &mut self,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        if !self.usable {
            return Err(ClientError::Io(io::Error::new(
                io::ErrorKind::NotConnected,
                "the connection is unusable after an earlier failed request",
            )));
        }
        self.usable = false;
        let response = tokio::time::timeout(timeout, self.exchange(request))
            .await
            .map_err(|_| ClientError::Timeout(timeout))??;
        self.usable = true;
        Ok(response)
    }

    async fn exchange(&mut self, request: &Request) -> Result<Response, ClientError> {
        self.out.clear();
        request.encode_into(&mut self.out);
        self.io.write_all(&self.out).await?;
        self.io.flush().await?;
        loop {
            match decode_response(&self.buf[self.start..], &self.limits) {
                Ok(Some((response, consumed))) => {
                    self.start += consumed;
                    if self.start == self.buf.len() {
                        self.buf.clear();
                        self.start = 0;
                    }
                    return Ok(response);
                }
                Ok(None) => {
                    if self.start > 0 {
                        self.buf.drain(..self.start);
                        self.start = 0;
                    }
                    self.buf.reserve(READ_CHUNK);
                    if self.io.read_buf(&mut self.buf).await? == 0 {
                        return Err(ClientError::Closed);
                    }
                }
                Err(e) => return Err(ClientError::Malformed(e)),
            }
        }
    }
}

/// Connect, send one request, return the response.
///
/// `timeout` bounds the connection and, separately, the exchange.
pub async fn request(
    addr: &str,
    transport: &Transport,
    request: &Request,
    timeout: Duration,
) -> Result<Response, ClientError> {
    let mut connection = Connection::connect(addr, transport, timeout).await?;
    connection.send(request, timeout).await
}

/// Splits `host:port` (IPv6 as `[::1]:4480`) into the host (without brackets) and the port.
pub fn split_host_port(addr: &str) -> Result<(String, u16), ClientError> {
    let invalid = |reason| ClientError::Address {
        addr: addr.to_owned(),
        reason,
    };
    let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| invalid("an IPv6 address needs a closing ']'"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| invalid("expected [IPv6]:port (the AGTP port is 4480)"))?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(invalid("not an IPv6 address between the brackets"));
        }
        (host, port)
    } else {
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| invalid("expected host:port (the AGTP port is 4480)"))?;
        if host.contains(':') {
            return Err(invalid("write an IPv6 address in brackets: [::1]:4480"));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(invalid("the host is empty"));
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("the host contains spaces or control characters"));
    }
    let port = match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => return Err(invalid("the port must be a number from 1 to 65535")),
    };
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use agora_agtp::Status;
    use tokio::net::TcpListener;

    use super::*;

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn split_host_port_forms() {
        for (addr, host, port) in [
            ("127.0.0.1:4480", "127.0.0.1", 4480),
            ("localhost:1", "localhost", 1),
            ("[::1]:4480", "::1", 4480),
            ("ans.example.org:65535", "ans.example.org", 65535),
        ] {
            assert_eq!(
                split_host_port(addr).expect(addr),
                (host.to_owned(), port),
                "{addr}"
            );
        }
        for addr in [
            "",
            "localhost",
            ":4480",
            "::1:4480",
            "[::1]",
            "[::1]4480",
            "[::1:4480",
            "[example.org]:4480",
            "host:0",
            "host:65536",
            "host:+80",
            "host:",
            "a b:80",
        ] {
            let err = split_host_port(addr).expect_err(addr);
            assert!(matches!(err, ClientError::Address { .. }), "{addr}: {err}");
            assert!(err.to_string().contains("invalid AGTP address"), "{err}");
        }
    }

    #[test]
    fn transport_for_host() {
        let roots = Roots::WebPki;
        let plain = |host, force, insecure| {
            matches!(
                Transport::for_host(host, force, insecure, &roots).expect("transport"),
                Transport::Plain
            )
        };
        for host in [
            "localhost",
            "LOCALHOST.",
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "[::1]",
        ] {
            assert!(plain(host, false, false), "{host}");
            assert!(!plain(host, true, false), "{host}");
            assert!(!plain(host, true, true), "{host}");
        }
        for host in [
            "ans.example.org",
            "192.0.2.1",
            "[2001:db8::1]",
            "localhost.example",
        ] {
            assert!(!plain(host, false, false), "{host}");
            assert!(plain(host, false, true), "{host}");
        }
        match Transport::for_host("[2001:db8::1]", false, false, &roots).expect("transport") {
            Transport::Tls { server_name, .. } => assert_eq!(server_name, "2001:db8::1"),
            Transport::Plain => panic!("expected TLS"),
        }
    }

    /// A one-connection server that reads one request, then writes `reply` and waits for EOF.
    async fn canned(reply: &'static [u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buf = Vec::new();
            while agora_agtp::codec::decode_request(&buf, &Limits::default())
                .expect("request")
                .is_none()
            {
                if socket.read_buf(&mut buf).await.expect("read") == 0 {
                    return;
                }
            }
            socket.write_all(reply).await.expect("write");
            let mut rest = Vec::new();
            let _ = socket.read_to_end(&mut rest).await;
        });
        addr
    }

    #[tokio::test]
    async fn leftover_bytes_are_kept_for_the_next_response() {
        // Two responses arrive after the first request: the second stays buffered.
        let addr = canned(
            b"AGTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\naAGTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        let mut conn = Connection::connect(&addr, &Transport::Plain, T)
            .await
            .expect("connect");
        let first = conn.send(&Request::new("A"), T).await.expect("first");
        assert_eq!(
            (first.status, first.body.as_slice()),
            (Status::OK, &b"a"[..])
        );
        let second = conn.send(&Request::new("B"), T).await.expect("second");
        assert_eq!(second.status, Status::NOT_FOUND);
        assert!(format!("{conn:?}").contains("buffered: 0"));
    }

    #[tokio::test]
    async fn malformed_response() {
        let addr = canned(b"HTTP/1.1 200 OK\r\n\r\n").await;
        let err = request(&addr, &Transport::Plain, &Request::new("A"), T)
            .await
            .expect_err("malformed");
        assert!(matches!(err, ClientError::Malformed(_)), "{err}");
        assert!(
            err.to_string().starts_with("malformed AGTP response"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn closed_before_a_full_response() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buf = [0u8; 64];
            let _ = socket.read(&mut buf).await;
            let _ = socket.write_all(b"AGTP/1.0 200 OK\r\n").await;
        });
        let mut conn = Connection::connect(&addr, &Transport::Plain, T)
            .await
            .expect("connect");
        let err = conn.send(&Request::new("A"), T).await.expect_err("closed");
        assert!(matches!(err, ClientError::Closed), "{err}");
        // The connection is not reused after a failed exchange.
        let err = conn
            .send(&Request::new("B"), T)
            .await
            .expect_err("unusable");
        assert!(matches!(err, ClientError::Io(_)), "{err}");
    }

    #[tokio::test]
    async fn timeouts_and_refused_connections() {
        let short = Duration::from_millis(200);
        // A truncated response on a connection the server keeps open.
        let addr = canned(b"AGTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nshort").await;
        let started = std::time::Instant::now();
        let err = request(&addr, &Transport::Plain, &Request::new("A"), short)
            .await
            .expect_err("timeout");
        assert!(
            matches!(err, ClientError::Timeout(d) if d == short),
            "{err}"
        );
        assert!(started.elapsed() < T);
        // Nobody listening.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let err = Connection::connect(&addr, &Transport::Plain, T)
            .await
            .expect_err("refused");
        assert!(matches!(err, ClientError::Connect { .. }), "{err}");
        assert!(err.to_string().contains(&addr), "{err}");
    }
}
