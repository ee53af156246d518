//! AGH over NATS: the bridge task, on the official `async-nats` client.
//!
//! The reference NATS profile (notes §4.1): envelopes are published, as their exact bytes and
//! without headers, on `agh.network.v0.<channel>.broadcast` (to null) or
//! `agh.network.v0.<channel>.peer.<route_token>` (directed). The node subscribes to the broadcast
//! subject of every channel it has local peers in and to the peer subject of each local peer, so
//! any runtime speaking that profile — including another Agora node that shares only the NATS
//! server — can join a channel.
//!
//! `async-nats` brings what NATS users rely on: several servers (a cluster; the client moves to
//! another when one goes), reconnection with backoff and resubscription, TLS (required or
//! negotiated, a private CA, a client certificate) and every authentication NATS has — token,
//! user and password, NKey seed, `.creds` file ([`NatsSettings`]). Connections use `no_echo`, so
//! our own publications do not come back.
//!
//! Traffic received from NATS is delivered to local agents; it is not re-published into the
//! libp2p mesh (and vice versa), so a NATS server joins nodes without creating loops.
//! Bounded: the client keeps at most [`SUBSCRIPTION_CAPACITY`] undelivered messages per
//! subscription (beyond that the server marks us a slow consumer and drops, logged once per
//! event), and forwarding waits on the AGH service's bounded queue.

use std::collections::BTreeSet;
use std::path::PathBuf;

use futures::StreamExt;
use tokio::sync::mpsc;

/// Largest payload accepted from the server (an envelope plus headroom).
pub const MAX_PAYLOAD: usize = (1 << 20) + 4096;

/// Messages the client buffers per subscription.
pub const SUBSCRIPTION_CAPACITY: usize = 4096;

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

/// How to reach and authenticate to NATS (`[agh.nats]`, `docs/node.md` "AGH over NATS").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsSettings {
    /// Server URLs (`nats://host:port`, `tls://host:port`), one or several of a cluster.
    pub servers: Vec<String>,
    /// Token authentication.
    pub token: Option<String>,
    /// User and password authentication.
    pub user: Option<String>,
    /// The password for `user`.
    pub password: Option<String>,
    /// A file holding an NKey seed (`SU…`).
    pub nkey_seed_file: Option<PathBuf>,
    /// A `.creds` file (JWT and NKey seed).
    pub creds_file: Option<PathBuf>,
    /// Require TLS.
    pub tls_required: bool,
    /// Extra root certificates (PEM) to trust.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), for servers that verify clients.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// Checks one server URL: `nats://`, `tls://` (or none) then `host:port`; credentials belong
/// in the settings, not the URL.
pub fn check_server(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("nats://")
        .or_else(|| url.strip_prefix("tls://"))
        .unwrap_or(url)
        .trim_end_matches('/');
    if rest.contains('@') {
        return Err(
            "put NATS credentials in the settings (user, password, token, creds_file), not the URL"
                .into(),
        );
    }
    if rest
        .rsplit_once(':')
        .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
    {
        return Err(format!("{url:?} is not nats://host:port"));
    }
    Ok(())
}

async fn options(settings: &NatsSettings) -> Result<async_nats::ConnectOptions, String> {
    let mut o = async_nats::ConnectOptions::new()
        .no_echo()
        .name("agora")
        .retry_on_initial_connect()
        .max_reconnects(None)
        .subscription_capacity(SUBSCRIPTION_CAPACITY)
        .event_callback(|event| async move {
            match event {
                async_nats::Event::Connected => tracing::info!("NATS connected"),
                async_nats::Event::Disconnected => {
                    tracing::warn!("NATS connection lost; reconnecting");
                }
                other => tracing::warn!(event = %other, "NATS event"),
            }
        });
    if let Some(creds) = &settings.creds_file {
        o = o
            .credentials_file(creds)
            .await
            .map_err(|e| format!("cannot read the creds file {}: {e}", creds.display()))?;
    } else if let Some(seed) = &settings.nkey_seed_file {
        let seed = std::fs::read_to_string(seed)
            .map_err(|e| format!("cannot read the NKey seed file {}: {e}", seed.display()))?;
        o = o.nkey(seed.trim().to_owned());
    } else if let (Some(user), Some(password)) = (&settings.user, &settings.password) {
        o = o.user_and_password(user.clone(), password.clone());
    } else if let Some(token) = &settings.token {
        o = o.token(token.clone());
    }
    if settings.tls_required {
        o = o.require_tls(true);
    }
    if let Some(ca) = &settings.ca_file {
        o = o.add_root_certificates(ca.clone());
    }
    if let Some((cert, key)) = &settings.client_cert {
        o = o.add_client_certificate(cert.clone(), key.clone());
    }
    Ok(o)
}

/// Runs the bridge until `commands` closes: connects (retrying until a server answers),
/// subscribes, publishes, and forwards messages to `messages`. Publications made while
/// disconnected are buffered by the client up to its limit, then dropped (NATS core has no
/// delivery guarantee; AGH receivers rely on greets and receipts, not on the transport).
pub async fn run(
    settings: NatsSettings,
    mut commands: mpsc::Receiver<Command>,
    messages: mpsc::Sender<Message>,
) {
    let options = match options(&settings).await {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(error = %e, "NATS bridge not started");
            return;
        }
    };
    let client = match options.connect(settings.servers.clone()).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "NATS bridge not started");
            return;
        }
    };
    let mut subjects: BTreeSet<String> = BTreeSet::new();
    let mut publish_failed = false;
    while let Some(cmd) = commands.recv().await {
        match cmd {
            Command::Publish { subject, payload } => {
                if let Err(e) = client.publish(subject, payload.into()).await {
                    if !publish_failed {
                        tracing::warn!(error = %e, "NATS publish failed");
                    }
                    publish_failed = true;
                } else {
                    publish_failed = false;
                }
            }
            Command::Subscribe(s) => {
                if !subjects.insert(s.clone()) {
                    continue;
                }
                match client.subscribe(s.clone()).await {
                    Ok(mut sub) => {
                        let out = messages.clone();
                        tokio::spawn(async move {
                            while let Some(m) = sub.next().await {
                                if m.payload.len() > MAX_PAYLOAD {
                                    continue;
                                }
                                let msg = Message {
                                    subject: m.subject.to_string(),
                                    payload: m.payload.to_vec(),
                                };
                                if out.send(msg).await.is_err() {
                                    return;
                                }
                            }
                        });
                    }
                    Err(e) => {
                        subjects.remove(&s);
                        tracing::warn!(subject = %s, error = %e, "NATS subscribe failed");
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
    fn server_urls() {
        assert!(check_server("nats://127.0.0.1:4222").is_ok());
        assert!(check_server("tls://nats.local:4443").is_ok());
        assert!(check_server("127.0.0.1:4222").is_ok());
        assert!(check_server("nats://user:pw@h:1").is_err());
        assert!(check_server("nats://host").is_err());
    }
}
