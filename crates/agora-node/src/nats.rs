//! AGH over NATS: a small client for the NATS core protocol and the bridge task.
//!
//! The reference NATS profile (notes §4.1): envelopes are published, as their exact bytes and
//! without headers, on `agh.network.v0.<channel>.broadcast` (to null) or
//! `agh.network.v0.<channel>.peer.<route_token>` (directed). The node subscribes to the broadcast
//! subject of every channel it has local peers in and to the peer subject of each local peer, so
//! any runtime speaking that profile — including another Agora node that shares only the NATS
//! server — can join a channel.
//!
//! The client speaks the text protocol directly (`INFO`, `CONNECT`, `PUB`, `SUB`, `MSG`,
//! `PING`/`PONG`, `+OK`/`-ERR`), with `echo:false` so our own publications do not come back, and
//! reconnects with backoff, re-subscribing everything. [`Parser`] is sans-IO and unit-tested.
//!
//! Traffic received from NATS is delivered to local agents; it is not re-published into the
//! libp2p mesh (and vice versa), so a NATS server joins nodes without creating loops.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Largest payload accepted from the server (an envelope plus headroom).
pub const MAX_PAYLOAD: usize = (1 << 20) + 4096;

/// One protocol operation sent by the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerOp {
    /// `INFO {json}`.
    Info(String),
    /// `MSG <subject> <sid> [reply-to] <#bytes>` and its payload.
    Msg {
        /// Subject.
        subject: String,
        /// Payload.
        payload: Vec<u8>,
    },
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
    /// `+OK`.
    Ok,
    /// `-ERR <message>`.
    Err(String),
}

/// The server sent something this client does not understand.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("NATS protocol error: {0}")]
pub struct ProtocolError(pub String);

/// Incremental parser of the server side of the NATS protocol.
#[derive(Debug, Default)]
pub struct Parser {
    buf: Vec<u8>,
}

impl Parser {
    /// Appends bytes read from the socket.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete operation, if the buffer holds one.
    pub fn next_op(&mut self) -> Result<Option<ServerOp>, ProtocolError> {
        let Some(eol) = self.buf.windows(2).position(|w| w == b"\r\n") else {
            if self.buf.len() > 64 * 1024 {
                return Err(ProtocolError("control line longer than 64 KiB".into()));
            }
            return Ok(None);
        };
        let line = String::from_utf8_lossy(&self.buf[..eol]).into_owned();
        let (verb, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let op = match verb.to_ascii_uppercase().as_str() {
            "MSG" => {
                let args: Vec<&str> = rest.split_whitespace().collect();
                let (subject, size) = match args.as_slice() {
                    [subject, _sid, size] | [subject, _sid, _, size] => (*subject, *size),
                    _ => return Err(ProtocolError(format!("bad MSG line {line:?}"))),
                };
                let size: usize = size
                    .parse()
                    .map_err(|_| ProtocolError(format!("bad MSG size in {line:?}")))?;
                if size > MAX_PAYLOAD {
                    return Err(ProtocolError(format!("MSG of {size} bytes is too large")));
                }
                let start = eol + 2;
                if self.buf.len() < start + size + 2 {
                    return Ok(None);
                }
                let payload = self.buf[start..start + size].to_vec();
                if &self.buf[start + size..start + size + 2] != b"\r\n" {
                    return Err(ProtocolError("MSG payload not followed by CRLF".into()));
                }
                self.buf.drain(..start + size + 2);
                return Ok(Some(ServerOp::Msg {
                    subject: subject.to_owned(),
                    payload,
                }));
            }
            "INFO" => ServerOp::Info(rest.to_owned()),
            "PING" => ServerOp::Ping,
            "PONG" => ServerOp::Pong,
            "+OK" => ServerOp::Ok,
            "-ERR" => ServerOp::Err(rest.trim().trim_matches('\'').to_owned()),
            _ => return Err(ProtocolError(format!("unknown operation {line:?}"))),
        };
        self.buf.drain(..eol + 2);
        Ok(Some(op))
    }
}

/// `PUB <subject> <#bytes>\r\n<payload>\r\n`.
pub fn encode_pub(subject: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("PUB {subject} {}\r\n", payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
    out
}

/// `SUB <subject> <sid>\r\n`.
pub fn encode_sub(subject: &str, sid: usize) -> Vec<u8> {
    format!("SUB {subject} {sid}\r\n").into_bytes()
}

/// The `CONNECT` line.
pub fn encode_connect() -> Vec<u8> {
    let opts = serde_json::json!({
        "verbose": false,
        "pedantic": false,
        "name": "agora",
        "lang": "rust",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": 1,
        "echo": false,
    });
    format!("CONNECT {opts}\r\nPING\r\n").into_bytes()
}

/// Commands to the bridge task.
#[derive(Debug)]
pub enum Command {
    /// Publish an envelope on a subject.
    Publish {
        /// Subject.
        subject: String,
        /// Envelope bytes.
        payload: Vec<u8>,
    },
    /// Subscribe to a subject (kept across reconnects).
    Subscribe(String),
}

/// A message received from NATS.
#[derive(Debug)]
pub struct Message {
    /// Subject.
    pub subject: String,
    /// Envelope bytes.
    pub payload: Vec<u8>,
}

/// Parses `nats://host:port` (or `host:port`).
pub fn server_addr(url: &str) -> Result<String, String> {
    let rest = url.strip_prefix("nats://").unwrap_or(url);
    let rest = rest.trim_end_matches('/');
    if rest.contains('@') {
        return Err("credentials in the NATS URL are not supported".into());
    }
    if rest
        .rsplit_once(':')
        .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
    {
        return Err(format!("{url:?} is not nats://host:port"));
    }
    Ok(rest.to_owned())
}

/// Runs the bridge until `commands` closes: connects, subscribes, publishes, and forwards
/// messages to `messages`; reconnects with backoff (250 ms doubling to 10 s) when the connection
/// is lost. Publications made while disconnected are dropped (NATS core has no delivery
/// guarantee; AGH receivers rely on greets and receipts, not on the transport).
pub async fn run(
    addr: String,
    mut commands: mpsc::Receiver<Command>,
    messages: mpsc::Sender<Message>,
) {
    let mut subjects: BTreeSet<String> = BTreeSet::new();
    let mut backoff = Duration::from_millis(250);
    loop {
        match TcpStream::connect(&addr).await {
            Ok(stream) => {
                backoff = Duration::from_millis(250);
                match session(stream, &mut subjects, &mut commands, &messages).await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(%addr, error = %e, "NATS connection lost; reconnecting");
                    }
                }
            }
            Err(e) => tracing::warn!(%addr, error = %e, "cannot reach the NATS server"),
        }
        // Keep accepting subscriptions while waiting, so that none is lost.
        let wait = tokio::time::sleep(backoff);
        tokio::pin!(wait);
        loop {
            tokio::select! {
                () = &mut wait => break,
                cmd = commands.recv() => match cmd {
                    None => return,
                    Some(Command::Subscribe(s)) => { subjects.insert(s); }
                    Some(Command::Publish { .. }) => {}
                },
            }
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

async fn session(
    mut stream: TcpStream,
    subjects: &mut BTreeSet<String>,
    commands: &mut mpsc::Receiver<Command>,
    messages: &mpsc::Sender<Message>,
) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let mut parser = Parser::default();
    let mut buf = vec![0u8; 64 * 1024];
    stream
        .write_all(&encode_connect())
        .await
        .map_err(|e| e.to_string())?;
    let mut sid = 0usize;
    for s in subjects.iter() {
        sid += 1;
        stream
            .write_all(&encode_sub(s, sid))
            .await
            .map_err(|e| e.to_string())?;
    }
    loop {
        tokio::select! {
            n = stream.read(&mut buf) => {
                let n = n.map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("the server closed the connection".into());
                }
                parser.feed(&buf[..n]);
                while let Some(op) = parser.next_op().map_err(|e| e.to_string())? {
                    match op {
                        ServerOp::Ping => stream.write_all(b"PONG\r\n").await.map_err(|e| e.to_string())?,
                        ServerOp::Msg { subject, payload } => {
                            if messages.send(Message { subject, payload }).await.is_err() {
                                return Ok(());
                            }
                        }
                        ServerOp::Err(e) => tracing::warn!(error = %e, "NATS server error"),
                        ServerOp::Info(_) | ServerOp::Pong | ServerOp::Ok => {}
                    }
                }
            }
            cmd = commands.recv() => {
                let Some(cmd) = cmd else { return Ok(()) };
                match cmd {
                    Command::Publish { subject, payload } => {
                        stream.write_all(&encode_pub(&subject, &payload)).await.map_err(|e| e.to_string())?;
                    }
                    Command::Subscribe(s) => {
                        if subjects.insert(s.clone()) {
                            sid += 1;
                            stream.write_all(&encode_sub(&s, sid)).await.map_err(|e| e.to_string())?;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_split_and_joined_operations() {
        let mut p = Parser::default();
        p.feed(b"INFO {\"server_id\":\"x\"}\r\nPI");
        assert_eq!(
            p.next_op().unwrap(),
            Some(ServerOp::Info("{\"server_id\":\"x\"}".into()))
        );
        assert_eq!(p.next_op().unwrap(), None);
        p.feed(b"NG\r\nMSG agh.network.v0.b.broadcast 1 5\r\nhel");
        assert_eq!(p.next_op().unwrap(), Some(ServerOp::Ping));
        assert_eq!(p.next_op().unwrap(), None);
        p.feed(b"lo\r\nMSG s 2 reply.to 2\r\nhi\r\n+OK\r\n-ERR 'Unknown Protocol Operation'\r\n");
        assert_eq!(
            p.next_op().unwrap(),
            Some(ServerOp::Msg {
                subject: "agh.network.v0.b.broadcast".into(),
                payload: b"hello".to_vec()
            })
        );
        assert_eq!(
            p.next_op().unwrap(),
            Some(ServerOp::Msg {
                subject: "s".into(),
                payload: b"hi".to_vec()
            })
        );
        assert_eq!(p.next_op().unwrap(), Some(ServerOp::Ok));
        assert_eq!(
            p.next_op().unwrap(),
            Some(ServerOp::Err("Unknown Protocol Operation".into()))
        );
        assert_eq!(p.next_op().unwrap(), None);
    }

    #[test]
    fn payloads_may_contain_crlf() {
        let mut p = Parser::default();
        p.feed(b"MSG s 1 4\r\na\r\nb\r\n");
        assert_eq!(
            p.next_op().unwrap(),
            Some(ServerOp::Msg {
                subject: "s".into(),
                payload: b"a\r\nb".to_vec()
            })
        );
    }

    #[test]
    fn rejects_nonsense() {
        for bad in [
            &b"BOGUS\r\n"[..],
            b"MSG s 1\r\n",
            b"MSG s 1 x\r\n",
            b"MSG s 1 999999999\r\n",
            b"MSG s 1 2\r\nabXY",
        ] {
            let mut p = Parser::default();
            p.feed(bad);
            assert!(p.next_op().is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn encodes_operations() {
        assert_eq!(encode_pub("a.b", b"xy"), b"PUB a.b 2\r\nxy\r\n");
        assert_eq!(encode_sub("a.>", 3), b"SUB a.> 3\r\n");
        let c = String::from_utf8(encode_connect()).unwrap();
        assert!(
            c.starts_with("CONNECT {") && c.contains("\"echo\":false") && c.ends_with("PING\r\n")
        );
    }

    #[test]
    fn server_urls() {
        assert_eq!(
            server_addr("nats://127.0.0.1:4222").unwrap(),
            "127.0.0.1:4222"
        );
        assert_eq!(server_addr("127.0.0.1:4222").unwrap(), "127.0.0.1:4222");
        assert!(server_addr("nats://user:pw@h:1").is_err());
        assert!(server_addr("nats://host").is_err());
    }
}
