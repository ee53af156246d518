//! Serving the faces: binding their listeners, then serving the AGH WebSocket, the HTTP API
//! (with the MCP server at `/mcp`),
//! JSON-RPC and AGTP until the node stops (each behind the serving layer, [`super::serve`], but
//! AGTP, which has its own listener), with every request counted by the telemetry.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use super::{agh_ws, agtp, http, mcp, rpc, serve, state::AppState};
use crate::ans;
use crate::call::Call;
use crate::config::Config;

/// A listener could not be bound or failed.
#[derive(Debug, thiserror::Error)]
#[error("{face} listener on {addr}: {source}{}", in_use_hint(self))]
pub struct ListenError {
    /// Face name.
    pub face: &'static str,
    /// Address.
    pub addr: SocketAddr,
    /// Cause.
    pub source: std::io::Error,
}

/// The faces' bound listeners and their local addresses.
#[derive(Debug)]
pub struct Listeners {
    agh: (TcpListener, SocketAddr),
    http: (TcpListener, SocketAddr),
    rpc: (TcpListener, SocketAddr),
    agtp: (TcpListener, SocketAddr),
}

/// For an address in use: what to do about it.
fn in_use_hint(e: &ListenError) -> String {
    if e.source.kind() != std::io::ErrorKind::AddrInUse {
        return String::new();
    }
    format!(
        " (another process, perhaps a first node, listens there: give this one another address \
         with --{}-listen, port 0 for any free one, or --ephemeral-ports to put every face on a \
         free port)",
        e.face
    )
}

async fn bind(face: &'static str, addr: SocketAddr) -> Result<TcpListener, ListenError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ListenError { face, addr, source })
}

fn local_addr(
    face: &'static str,
    listener: TcpListener,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), ListenError> {
    let local = listener
        .local_addr()
        .map_err(|source| ListenError { face, addr, source })?;
    Ok((listener, local))
}

impl Listeners {
    /// Binds the AGH, HTTP, JSON-RPC and AGTP listeners `config` names.
    pub async fn bind(config: &Config) -> Result<Self, ListenError> {
        let agh = bind("agh", config.agh_listen).await?;
        let http = bind("http", config.http_listen).await?;
        let rpc = bind("rpc", config.rpc_listen).await?;
        let agtp = bind("agtp", config.agtp_listen).await?;
        Ok(Self {
            agh: local_addr("agh", agh, config.agh_listen)?,
            http: local_addr("http", http, config.http_listen)?,
            rpc: local_addr("rpc", rpc, config.rpc_listen)?,
            agtp: local_addr("agtp", agtp, config.agtp_listen)?,
        })
    }

    /// Each face's name and URL, in the order the node announces them.
    pub fn urls(&self) -> Vec<(&'static str, String)> {
        vec![
            ("agh", format!("ws://{}/agh/v0", self.agh.1)),
            ("rpc", format!("ws://{}", self.rpc.1)),
            ("http", format!("http://{}", self.http.1)),
            ("agtp", format!("agtp://{}", self.agtp.1)),
        ]
    }
}

/// What the JSON-RPC face shares with the Hyperspace service.
#[derive(Debug)]
pub struct RpcWiring {
    /// Where calls go (the call router).
    pub calls: mpsc::Sender<Call>,
    /// Session tokens.
    pub tokens: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
    /// Open connections (tool providers).
    pub links: rpc::Links,
    /// Where closed connections are reported.
    pub closed: mpsc::Sender<u64>,
}

/// The faces being served.
#[derive(Debug)]
pub struct Serving {
    stop: broadcast::Sender<()>,
    servers: Vec<JoinHandle<()>>,
    refresh: JoinHandle<()>,
}

impl Serving {
    /// Stops every face: open WebSocket sessions end when their sockets close; each listener
    /// has a moment (5 s) to finish.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let grace = Duration::from_secs(5);
        for server in self.servers {
            let _ = tokio::time::timeout(grace, server).await;
        }
        self.refresh.abort();
    }
}

/// Serves every face on `listeners` until [`Serving::stop`].
pub fn start(
    config: &Config,
    listeners: Listeners,
    state: AppState,
    rpc_wiring: RpcWiring,
    agtp_face: agtp::Face,
) -> Serving {
    let telemetry = Arc::clone(&state.telemetry);
    let (stop_tx, _) = broadcast::channel::<()>(1);
    let access = serve::Access {
        api_key: config.api_key.as_deref().map(Into::into),
        public_paths: &[],
        allowed_origins: config.allowed_origins.clone().into(),
        allowed_hosts: config.allowed_hosts.clone().into(),
        own_http_port: listeners.http.1.port(),
    };
    let face = |listener: TcpListener, name: &'static str, router: axum::Router, access| {
        let mut stop = stop_tx.subscribe();
        let counted = Arc::clone(&telemetry);
        let router = router.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let counted = Arc::clone(&counted);
                async move {
                    let started = Instant::now();
                    let response = next.run(request).await;
                    counted.http_request(name, response.status().as_u16(), started.elapsed());
                    response
                }
            },
        ));
        let face = serve::Face {
            name,
            router,
            limits: config.faces(),
            access,
        };
        tokio::spawn(serve::serve(listener, face, async move {
            let _ = stop.recv().await;
        }))
    };
    let agh_server = face(
        listeners.agh.0,
        "agh",
        agh_ws::agh_face(state.clone()),
        access.clone(),
    );
    let mcp = mcp::router(mcp::Wiring {
        calls: rpc_wiring.calls.clone(),
        allowed_origins: config.allowed_origins.clone(),
        http_port: listeners.http.1.port(),
    });
    let faces = super::wrong_face::Faces::new(Arc::clone(&state.faces));
    let http_faces = faces.clone();
    let http_server = face(
        listeners.http.0,
        "http",
        {
            let told = move |method: axum::http::Method,
                             headers: axum::http::HeaderMap,
                             uri: axum::http::Uri| {
                let faces = http_faces.clone();
                async move { super::wrong_face::http_fallback(&faces, &method, &headers, uri.path()) }
            };
            // The HTTP API serves no WebSocket: an upgrade anywhere is a client that meant
            // another face.
            let upgrades = faces.clone();
            let no_upgrade = axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let faces = upgrades.clone();
                    async move {
                        let websocket = request
                            .headers()
                            .get(axum::http::header::UPGRADE)
                            .and_then(|v| v.to_str().ok())
                            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
                        if websocket {
                            let (method, path) = (request.method(), request.uri().path());
                            return super::wrong_face::http_fallback(
                                &faces,
                                method,
                                request.headers(),
                                path,
                            );
                        }
                        next.run(request).await
                    }
                },
            );
            http::http_face(state)
                .merge(mcp)
                .method_not_allowed_fallback(told.clone())
                .fallback(told)
                .layer(no_upgrade)
        },
        serve::Access {
            public_paths: if config.public_reads {
                http::READ_ONLY_PATHS
            } else {
                http::ASSET_PATHS
            },
            ..access.clone()
        },
    );
    let mut rpc_state = rpc::RpcState::new(
        rpc_wiring.calls,
        config.api_key.clone(),
        listeners.rpc.1.ip().is_loopback(),
        rpc_wiring.tokens,
        rpc_wiring.links,
        Some(rpc_wiring.closed),
    );
    rpc_state.limits = config.rpc.clone();
    rpc_state.ping_every = serve::ws_ping_interval(config.ws_idle_timeout);
    rpc_state.telemetry = Some(Arc::clone(&telemetry));
    rpc_state.faces = faces.clone();
    // The JSON-RPC face checks its credentials itself (the API key or a session token).
    let rpc_server = face(
        listeners.rpc.0,
        "rpc",
        rpc::face(rpc_state),
        serve::Access {
            api_key: None,
            ..access
        },
    );
    let refresh = tokio::spawn(Arc::clone(&agtp_face.ans).run_refresh());
    let agtp_server = {
        let mut stop = stop_tx.subscribe();
        tokio::spawn(agtp::listener::serve(
            listeners.agtp.0,
            agtp::listener::ListenerConfig {
                tls: agtp_face.tls,
                server_id: agtp_face.ans.name().to_owned(),
                http_hint: Some(faces.http_on_agtp()),
                ..agtp::listener::ListenerConfig::default()
            },
            Arc::new(agtp::listener::CountedAgtp(
                ans::AnsHandler(Arc::clone(&agtp_face.ans)),
                Arc::clone(&telemetry),
            )),
            async move {
                let _ = stop.recv().await;
            },
        ))
    };
    Serving {
        stop: stop_tx,
        servers: vec![agh_server, http_server, rpc_server, agtp_server],
        refresh,
    }
}
