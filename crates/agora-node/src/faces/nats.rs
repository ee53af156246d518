//! AGH over NATS: the bridge task between the AGH service and a NATS server or cluster, over the
//! official `async-nats` client.
//!
//! The NATS profile of the AGH reference implementation (`docs/node.md` "AGH over NATS"): envelopes are published, as their exact bytes and
//! without headers, on `agh.network.v0.<channel>.broadcast` (to null) or
//! `agh.network.v0.<channel>.peer.<route_token>` (directed). The node subscribes to the broadcast
//! subject of every channel it has local peers in and to the peer subject of each local peer, so
//! any runtime speaking that profile — including another Agora node that shares only the NATS
//! server — can join a channel. The connection is made with `echo` off (our own publications do
//! not come back) and the client name `agora`. A message received with headers is taken by its
//! payload alone.
//!
//! This module owns:
//!
//! - **The connection options** ([`Bridge::connect`]) built from `[agh.nats]`: the server list
//!   (several URLs of one cluster; servers the cluster announces are added by the client), one
//!   authentication method (token, user and password, NKey seed file or creds file; secrets read
//!   from files or taken from the environment, never logged), and TLS (rustls with the ring
//!   provider, the Mozilla roots or a CA file, an optional client certificate). The node starts
//!   whether or not a server answers: `async-nats` connects in the background, reconnects
//!   across the servers with its own backoff and re-subscribes everything.
//! - **The bridge task** ([`Bridge::run`]), which never waits on the network or on the AGH
//!   service, so neither can stall the other. Its queues are bounded:
//!   - commands from the AGH service: [`QUEUE`] entries (the service waits when it is full);
//!   - publications go to the client's outbound queue ([`CLIENT_CAPACITY`]); one made while
//!     the client is not connected, or when that queue is full, is dropped and counted (NATS
//!     core promises no delivery; AGH receivers rely on greets and receipts);
//!   - each subscription buffers [`SUBSCRIPTION_CAPACITY`] messages in the client, which drops
//!     beyond that and reports a slow consumer (logged);
//!   - messages to the AGH service: [`QUEUE`] entries; when full, a message is dropped and
//!     counted.
//!
//!   Drops are logged at most once a minute, with their count.
//! - **Connection logging**: `connected` and `disconnected` once per transition; a failed
//!   connection attempt once per distinct error until the next connection (a refused
//!   credential as `NATS server refused the credentials`); server errors likewise. The
//!   client's own log lines (`async_nats` target) are off in the default log filter.
//!
//! Traffic received from NATS is delivered to local agents; it is not re-published into the
//! libp2p mesh (and vice versa), so a NATS server joins nodes without creating loops.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::{Client, ConnectOptions, Event, ServerAddr, Subscriber};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, SelectAll};
use futures::{FutureExt as _, StreamExt as _};
use tokio::sync::mpsc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use crate::config::nats_server_addr as server_addr;
use crate::config::{NatsConfig, Secret};

/// Capacity of the command queue into the bridge and of the message queue out of it.
pub const QUEUE: usize = 4096;
/// Capacity of the client's outbound queue (publications and subscriptions not yet written).
pub const CLIENT_CAPACITY: usize = 4096;
/// Messages the client buffers per subscription before dropping (slow consumer).
pub const SUBSCRIPTION_CAPACITY: usize = 4096;
/// Connection events waiting for the bridge task (more are dropped).
const EVENTS: usize = 64;
/// Least time between two warnings about dropped messages.
const DROP_WARNING_EVERY: Duration = Duration::from_secs(60);

/// The bridge could not be set up from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// A server URL is unusable.
    #[error("server {url:?}: {message}")]
    Server {
        /// The URL as configured.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// A secret, key or certificate file cannot be read or parsed.
    #[error("{key} {path:?}: {message}")]
    File {
        /// The configuration key naming the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A secret is empty.
    #[error("{0} is empty")]
    EmptySecret(&'static str),
    /// The TLS configuration cannot be built.
    #[error("tls: {0}")]
    Tls(String),
    /// The client refused the options.
    #[error("client: {0}")]
    Client(String),
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

/// A connected (or connecting) client and the events it reports.
#[derive(Debug)]
pub struct Bridge {
    client: Client,
    events: mpsc::Receiver<Event>,
}

impl Bridge {
    /// Builds the client from `config` and starts connecting in the background; fails only
    /// when the configuration cannot be used (a URL, a file, a certificate), never because no
    /// server answers.
    pub async fn connect(config: &NatsConfig) -> Result<Self, NatsError> {
        let servers = config
            .servers
            .iter()
            .map(|url| {
                server_addr(url).map_err(|message| NatsError::Server {
                    url: url.clone(),
                    message,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (events_tx, events) = mpsc::channel(EVENTS);
        let mut options = ConnectOptions::new()
            .name("agora")
            .no_echo()
            .retry_on_initial_connect()
            .client_capacity(CLIENT_CAPACITY)
            .subscription_capacity(SUBSCRIPTION_CAPACITY)
            .event_callback(move |event| {
                let events_tx = events_tx.clone();
                async move {
                    let _ = events_tx.try_send(event);
                }
            });
        if let Some(token) = &config.token {
            options = options.token(read_secret(token, "agh.nats.token_file")?);
        }
        if let Some(user) = &config.user {
            let password = match &config.password {
                Some(p) => read_secret(p, "agh.nats.password_file")?,
                None => return Err(NatsError::EmptySecret("agh.nats.password")),
            };
            options = options.user_and_password(user.clone(), password);
        }
        if let Some(path) = &config.nkey_seed_file {
            options = options.nkey(read_secret(
                &Secret::File(path.clone()),
                "agh.nats.nkey_seed_file",
            )?);
        }
        if let Some(path) = &config.creds_file {
            let creds = read_file(path, "agh.nats.creds_file")?;
            options = options.credentials(&creds).map_err(|e| NatsError::File {
                key: "agh.nats.creds_file",
                path: path.clone(),
                message: e.to_string(),
            })?;
        }
        let tls_wanted = config.tls_required || servers.iter().any(ServerAddr::tls_required);
        options = options
            .require_tls(tls_wanted)
            .tls_client_config(tls_config(config)?);
        let client = options
            .connect(servers)
            .await
            .map_err(|e| NatsError::Client(e.to_string()))?;
        Ok(Self { client, events })
    }

    /// Runs the bridge until `commands` closes (see the module documentation).
    pub async fn run(self, mut commands: mpsc::Receiver<Command>, messages: mpsc::Sender<Message>) {
        let Self { client, mut events } = self;
        let mut subscribed: BTreeSet<String> = BTreeSet::new();
        let mut pending: FuturesUnordered<BoxFuture<'static, Subscribed>> = FuturesUnordered::new();
        let mut streams: SelectAll<Subscriber> = SelectAll::new();
        let mut log = ConnectionLog::default();
        let mut dropped_out = Drops::new(
            "publications to NATS dropped (not connected, or the client's queue is full)",
        );
        let mut dropped_in =
            Drops::new("messages from NATS dropped (the AGH service's queue is full)");
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    None => break,
                    Some(Command::Publish { subject, payload }) => {
                        if !publish(&client, subject, payload) {
                            dropped_out.add();
                        }
                    }
                    Some(Command::Subscribe(subject)) => {
                        if subscribed.insert(subject.clone()) {
                            let client = client.clone();
                            pending.push(async move {
                                let result = client.subscribe(subject.clone()).await;
                                Subscribed { subject, result }
                            }.boxed());
                        }
                    }
                },
                Some(done) = pending.next(), if !pending.is_empty() => match done.result {
                    Ok(subscriber) => streams.push(subscriber),
                    Err(e) => {
                        tracing::warn!(subject = %done.subject, error = %e, "NATS subscription failed");
                        subscribed.remove(&done.subject);
                    }
                },
                Some(message) = streams.next(), if !streams.is_empty() => {
                    let message = Message {
                        subject: message.subject.to_string(),
                        payload: message.payload.into(),
                    };
                    match messages.try_send(message) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => dropped_in.add(),
                        Err(mpsc::error::TrySendError::Closed(_)) => break,
                    }
                }
                Some(event) = events.recv() => log.event(&event),
            }
        }
    }
}

/// A subscription request that completed.
struct Subscribed {
    subject: String,
    result: Result<Subscriber, async_nats::SubscribeError>,
}

/// Publishes without waiting: `false` when the envelope was dropped because the client is not
/// connected or its outbound queue is full.
fn publish(client: &Client, subject: String, payload: Vec<u8>) -> bool {
    if client.connection_state() != async_nats::connection::State::Connected {
        return false;
    }
    match client.publish(subject, payload.into()).now_or_never() {
        Some(Ok(())) => true,
        Some(Err(e)) => {
            tracing::debug!(error = %e, "NATS publication refused");
            false
        }
        None => false,
    }
}

/// A count of dropped messages, warned about at most once a minute.
struct Drops {
    what: &'static str,
    since_warning: u64,
    last_warning: Option<Instant>,
}

impl Drops {
    fn new(what: &'static str) -> Self {
        Self {
            what,
            since_warning: 0,
            last_warning: None,
        }
    }

    fn add(&mut self) {
        self.since_warning += 1;
        if self
            .last_warning
            .is_none_or(|at| at.elapsed() >= DROP_WARNING_EVERY)
        {
            tracing::warn!(dropped = self.since_warning, "{}", self.what);
            self.since_warning = 0;
            self.last_warning = Some(Instant::now());
        }
    }
}

/// Logs connection events once per transition or distinct error.
#[derive(Debug, Default)]
struct ConnectionLog {
    connected: bool,
    /// Errors already logged since the last connection.
    seen: BTreeSet<String>,
}

impl ConnectionLog {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Connected => {
                if !self.connected {
                    tracing::info!("NATS bridge connected");
                }
                self.connected = true;
                self.seen.clear();
            }
            Event::Disconnected => {
                if self.connected {
                    tracing::warn!("NATS bridge disconnected; reconnecting across the servers");
                }
                self.connected = false;
            }
            Event::ClientError(async_nats::ClientError::Other(e)) => {
                if self.seen.insert(e.clone()) {
                    if e.contains("authorization violation") {
                        tracing::error!(
                            error = %e,
                            "NATS server refused the credentials; check [agh.nats] token, \
                             user and password, nkey_seed_file or creds_file"
                        );
                    } else {
                        tracing::warn!(error = %e, "NATS connection attempt failed; retrying");
                    }
                }
            }
            Event::ServerError(async_nats::ServerError::AuthorizationViolation) => {
                if self.seen.insert("server: authorization violation".into()) {
                    tracing::error!(
                        "NATS server refused the credentials; check [agh.nats] token, user and \
                         password, nkey_seed_file or creds_file"
                    );
                }
            }
            Event::ServerError(e) => {
                if self.seen.insert(format!("server: {e}")) {
                    tracing::warn!(error = %e, "NATS server error");
                }
            }
            Event::SlowConsumer(sid) => {
                tracing::warn!(sid, "NATS subscription dropped messages (slow consumer)");
            }
            Event::LameDuckMode => tracing::info!("NATS server entering lame duck mode"),
            Event::ClientError(e) => tracing::warn!(error = %e, "NATS client error"),
            Event::Draining | Event::Closed => {}
        }
    }
}

/// The secret's value: the file's contents (surrounding whitespace trimmed) or the value.
fn read_secret(secret: &Secret, key: &'static str) -> Result<String, NatsError> {
    let value = match secret {
        Secret::File(path) => read_file(path, key)?.trim().to_owned(),
        Secret::Value(v) => v.trim().to_owned(),
    };
    if value.is_empty() {
        return Err(NatsError::EmptySecret(key));
    }
    Ok(value)
}

fn read_file(path: &Path, key: &'static str) -> Result<String, NatsError> {
    std::fs::read_to_string(path).map_err(|e| NatsError::File {
        key,
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// rustls with the ring provider (TLS 1.2 and 1.3), trusting `ca_file` or the Mozilla roots,
/// with the client certificate when one is configured.
fn tls_config(config: &NatsConfig) -> Result<rustls::ClientConfig, NatsError> {
    let mut roots = rustls::RootCertStore::empty();
    match &config.ca_file {
        Some(path) => {
            for cert in load_certs(path, "agh.nats.ca_file")? {
                roots.add(cert).map_err(|e| NatsError::File {
                    key: "agh.nats.ca_file",
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| NatsError::Tls(e.to_string()))?
    .with_root_certificates(roots);
    match (&config.cert_file, &config.key_file) {
        (Some(cert), Some(key)) => {
            let chain = load_certs(cert, "agh.nats.cert_file")?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| NatsError::File {
                key: "agh.nats.key_file",
                path: key.clone(),
                message: e.to_string(),
            })?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| NatsError::Tls(e.to_string()))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

fn load_certs(path: &Path, key: &'static str) -> Result<Vec<CertificateDer<'static>>, NatsError> {
    let file_error = |message: String| NatsError::File {
        key,
        path: path.to_path_buf(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error("no PEM certificate found".into()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        for ok in [
            "nats://127.0.0.1:4222",
            "127.0.0.1:4222",
            "tls://localhost:4443",
            "nats://host",
        ] {
            assert!(server_addr(ok).is_ok(), "{ok}");
        }
        assert!(server_addr("tls://h:1").unwrap().tls_required());
        let err = server_addr("nats://user:pw@h:1").unwrap_err();
        assert!(err.contains("credentials"), "{err}");
        assert!(!err.contains("pw"), "the password is not echoed: {err}");
        assert!(server_addr("ws://h:1").is_err());
        assert!(server_addr("http://h:1").is_err());
        assert!(server_addr("nats://h:notaport").is_err());
    }

    #[test]
    fn secrets_are_read_trimmed_and_must_not_be_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        assert_eq!(
            read_secret(&Secret::File(file.clone()), "k").unwrap(),
            "s3cret"
        );
        assert_eq!(read_secret(&Secret::Value(" v ".into()), "k").unwrap(), "v");
        std::fs::write(&file, "\n").unwrap();
        assert!(matches!(
            read_secret(&Secret::File(file), "k"),
            Err(NatsError::EmptySecret("k"))
        ));
        let missing = read_secret(&Secret::File(dir.path().join("none")), "k").unwrap_err();
        assert!(missing.to_string().contains("none"), "{missing}");
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let config = NatsConfig {
            ca_file: Some(PathBuf::from("missing-ca.pem")),
            ..NatsConfig::default()
        };
        let err = tls_config(&config).unwrap_err();
        assert!(err.to_string().contains("agh.nats.ca_file"), "{err}");
        assert!(tls_config(&NatsConfig::default()).is_ok());
    }

    #[test]
    fn connection_events_are_logged_once_per_transition() {
        let mut log = ConnectionLog::default();
        let refused = Event::ClientError(async_nats::ClientError::Other(
            "authorization violation".into(),
        ));
        log.event(&refused);
        log.event(&refused);
        assert_eq!(log.seen.len(), 1);
        log.event(&Event::Connected);
        assert!(log.connected && log.seen.is_empty());
        log.event(&Event::Disconnected);
        assert!(!log.connected);
    }
}
