//! One connection to an MCP server (MCP `basic/lifecycle`, `basic/transports`; rmcp 3.11):
//! spawning a stdio child with its allow-listed environment, or opening Streamable HTTP; the
//! dual-era handshake (`ClientLifecycleMode::Auto`: `server/discover`, else `initialize`);
//! list-changed notifications (the legacy callback and the modern `subscriptions/listen`
//! stream) turned into re-list requests; and telling a 2024-11-05 HTTP+SSE server apart.

use std::process::Stdio;
use std::time::Duration;

use agora_bridge::mcp::{ServerSpec, Transport, env::child_env, era::Era};
use rmcp::model::{ProtocolVersion, SubscriptionFilter};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientCacheConfig, ClientHandler, RoleClient};
use tokio::sync::mpsc;

/// Longest wait for a server to start and finish its handshake.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
    /// The spec designates no reachable server.
    #[error("{0}")]
    Spec(#[from] agora_bridge::mcp::SpecError),
    /// The program could not be started.
    #[error("cannot start {command:?}: {error}")]
    Spawn {
        /// The program.
        command: String,
        /// What the system said.
        error: std::io::Error,
    },
    /// The server speaks the deprecated 2024-11-05 HTTP+SSE transport.
    #[error(
        "unsupported transport: {0} speaks the 2024-11-05 HTTP+SSE transport (GET answers an \
         event stream), which MCP deprecated and this bridge does not speak; serve it over \
         Streamable HTTP or stdio"
    )]
    LegacySse(String),
    /// The handshake failed.
    #[error("MCP handshake failed: {0}")]
    Handshake(String),
    /// No handshake within [`CONNECT_TIMEOUT`].
    #[error("the server did not finish its MCP handshake within {0:?}")]
    Timeout(Duration),
}

/// The client side of a connection: re-list requests out of notifications.
#[derive(Clone)]
pub(super) struct Handler {
    /// A re-list is wanted (capacity 1: a pending request covers later ones).
    pub(super) relist: mpsc::Sender<()>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.relist.try_send(());
    }
}

/// A live connection.
pub(super) struct Connection {
    /// The running rmcp client (dropping it closes the connection and kills a child).
    pub(super) running: RunningService<RoleClient, Handler>,
    /// The era found.
    pub(super) era: Era,
    /// The negotiated protocol version.
    pub(super) protocol_version: String,
    /// The child's process id (stdio).
    pub(super) pid: Option<u32>,
}

fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// Connects to the server `spec` designates.
pub(super) async fn connect(
    spec: &ServerSpec,
    handler: Handler,
) -> Result<Connection, ConnectError> {
    let transport = spec.transport()?;
    let (outcome, pid) = match &transport {
        Transport::Stdio { command, args } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args)
                .env_clear()
                .envs(child_env(std::env::vars(), &spec.env))
                .kill_on_drop(true);
            if let Some(cwd) = &spec.cwd {
                cmd.current_dir(cwd);
            }
            let (child, _) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::null())
                .spawn()
                .map_err(|error| ConnectError::Spawn {
                    command: command.clone(),
                    error,
                })?;
            let pid = child.id();
            let started = tokio::time::timeout(
                CONNECT_TIMEOUT,
                handler.serve_with_lifecycle(child, lifecycle()),
            )
            .await;
            (started, pid)
        }
        Transport::Http { url } => {
            let t = StreamableHttpClientTransport::from_uri(url.as_str());
            let started = tokio::time::timeout(
                CONNECT_TIMEOUT,
                handler.serve_with_lifecycle(t, lifecycle()),
            )
            .await;
            if let Ok(Err(_)) = &started
                && speaks_legacy_sse(url).await
            {
                return Err(ConnectError::LegacySse(url.clone()));
            }
            (started, None)
        }
    };
    let running = match outcome {
        Err(_) => return Err(ConnectError::Timeout(CONNECT_TIMEOUT)),
        Ok(Err(e)) => return Err(ConnectError::Handshake(e.to_string())),
        Ok(Ok(r)) => r,
    };
    // Every list is fresh: a list-changed notification must be followed by the new list, never a
    // cached one (SEP-2549's TTL cache would serve the old one).
    running
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let protocol_version = running
        .peer()
        .peer_info()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    Ok(Connection {
        era: Era::of(&protocol_version),
        protocol_version,
        pid,
        running,
    })
}

/// For a modern server announcing `tools.listChanged`: a task reading its
/// `subscriptions/listen` stream, asking for a re-list at each notification.
pub(super) fn listen(
    conn: &Connection,
    relist: mpsc::Sender<()>,
) -> Option<tokio::task::JoinHandle<()>> {
    let peer = conn.running.peer().clone();
    let announces = peer
        .peer_info()
        .and_then(|i| i.capabilities.tools.as_ref().and_then(|t| t.list_changed))
        == Some(true);
    if conn.era != Era::Modern || !announces {
        return None;
    }
    Some(tokio::spawn(async move {
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        let Ok(mut sub) = peer.listen(filter).await else {
            tracing::debug!("the MCP server refused subscriptions/listen");
            return;
        };
        while let Ok(Some(_)) = sub.next().await {
            let _ = relist.try_send(());
        }
    }))
}

/// Whether `url` answers a plain GET with an event stream: the 2024-11-05 HTTP+SSE transport
/// (a Streamable HTTP server answers a GET without a session with an error status).
async fn speaks_legacy_sse(url: &str) -> bool {
    let url = url.to_owned();
    let probe = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(3)))
            .http_status_as_error(false)
            .build()
            .into();
        let Ok(response) = agent.get(&url).header("accept", "text/event-stream").call() else {
            return false;
        };
        response.status() == 200
            && response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"))
    });
    matches!(
        tokio::time::timeout(Duration::from_secs(5), probe).await,
        Ok(Ok(true))
    )
}
