//! # agora-node — the Agora node
//!
//! The runtime around the sans-IO protocol crates: configuration, the persistent node key, the
//! redb store, the libp2p mesh, the AGH service, and the listeners. [`run`] starts everything,
//! prints one `listening on <face> <addr>` line per listener on stdout, and returns after a
//! graceful shutdown (SIGINT or SIGTERM).
//!
//! | layer | module | owns |
//! |---|---|---|
//! | mesh | [`mesh`] | the libp2p swarm and its task; its parts as files: `swarm` (building it), `join` (bootstrap with backoff), `codec` (request-response bytes), [`mesh::frames`] (gossipsub's inbound reader), [`mesh::gated`] (wake-gated handlers), [`mesh::pings`], [`mesh::connmgr`] (the connection manager), [`mesh::muxer`] (splitting large RPCs), [`mesh::topics`] (the topic budget) |
//! | faces | [`faces`] | how agents, tools and operators reach the node: the serving layer, the AGH WebSocket, the HTTP API (dashboard, `/metrics`), JSON-RPC, the AGTP listener, TLS and client, the NATS bridge |
//! | services | [`agh`] | the AGH service task (router, presence, lifecycle, delivery) |
//! | | [`ans`] | the Agent Name Service (DISCOVER, DESCRIBE, lifecycle, index, refresh, federation) |
//! | | [`hyperspace`] | the Hyperspace service task and one folder per primitive task (memory, learning, improving, payments) |
//! | | [`call`] | a JSON-RPC call as a face hands it to a service |
//! | | [`routes`] | the routers: calls by method prefix, mesh events by topic, protocol or kind, to the service that declares them |
//! | infrastructure | [`config`] | defaults, `agora.toml`, `AGORA_*` variables, flags |
//! | | [`clock`] | the wall clock the services read for protocol timestamps |
//! | | [`keys`] | the node's Ed25519 identity file |
//! | | [`store`] | the redb database and its single writer thread |
//! | | [`telemetry`] | the metrics registry and the recent connection events |
//!
//! The mesh reports to one router ([`routes::EventRouter`]) that hands each event to the service
//! whose entry claims it (by topic, protocol or kind; each service declares its entries), the
//! rest to the AGH service; JSON-RPC calls go through [`routes::CallRouter`], by method prefix.

pub mod agh;
pub mod ans;
pub mod call;
pub mod clock;
pub mod config;
pub mod faces;
pub mod hyperspace;
pub mod keys;
pub mod mesh;
pub mod routes;
pub mod store;
pub mod telemetry;

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use agora_agh::{Catalog, ValidationPolicy};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

pub use config::Config;

/// The node could not start or stopped on an error.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The configuration is unusable (checked before anything is created).
    #[error("configuration: {0}")]
    Config(#[from] config::ConfigError),
    /// The node key.
    #[error(transparent)]
    Key(#[from] keys::KeyError),
    /// The store.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The mesh.
    #[error(transparent)]
    Mesh(#[from] mesh::MeshError),
    /// The NATS bridge cannot be set up from its configuration.
    #[error("agh.nats: {0}")]
    Nats(#[from] faces::nats::NatsError),
    /// The AGTP face could not be set up (keys, certificate, peers, index).
    #[error("agtp: {0}")]
    Agtp(String),
    /// The learning service could not start (its store, its tokenizer).
    #[error("learning: {0}")]
    Learning(String),
    /// The Self-Improving service could not start (its store).
    #[error("improving: {0}")]
    Improving(String),
    /// The Micropayments service could not start (its wallet or store).
    #[error("payments: {0}")]
    Payments(String),
    /// The memory service could not start (its key, its store, its embedder).
    #[error("memory: {0}")]
    Memory(String),
    /// A listener could not be bound or failed.
    #[error("{face} listener on {addr}: {source}")]
    Listen {
        /// Face name.
        face: &'static str,
        /// Address.
        addr: std::net::SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
}

/// Prints the stable `listening on <face> <addr>` line and flushes, so that scripts reading a
/// pipe see it at once; logs it as the `listening` event (`face`, `addr`, `tls`).
fn announce(face: &str, addr: &str, tls: bool) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on {face} {addr}");
    let _ = out.flush();
    tracing::info!(face, addr, tls, "listening");
}

async fn bind(face: &'static str, addr: std::net::SocketAddr) -> Result<TcpListener, NodeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| NodeError::Listen { face, addr, source })
}

/// Runs a node until SIGINT or SIGTERM.
pub async fn run(config: Config) -> Result<(), NodeError> {
    run_until(config, shutdown_signal()).await
}

/// Runs a node until `shutdown` completes.
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    let started = Instant::now();
    // Nothing is created (key, database, listeners) for a configuration that cannot run.
    config.validate()?;
    let keypair = keys::load_or_create(&config.data)?;
    let data = config.data.clone();
    let store = tokio::task::spawn_blocking(move || store::Store::open(&data))
        .await
        .map_err(|e| store::StoreError::Db {
            path: config.data.clone(),
            message: e.to_string(),
        })??;
    let catalogs = load_catalogs(&store).await?;
    let interactions = load_interactions(&store).await?;

    let telemetry = Arc::new(telemetry::Telemetry::new());
    store.observe_commits(telemetry.store_commit.clone());
    let mesh = mesh::start(
        &keypair,
        &mesh::MeshConfig {
            listen: config.p2p_listen.clone(),
            bootstrap: config.bootstrap.clone(),
            heartbeat: Duration::from_millis(500),
            limits: config.peers,
            validators: vec![(
                hyperspace::TOPIC_PREFIX.to_owned(),
                Arc::new(hyperspace::GossipGate::new()),
            )],
            budget: mesh::topics::Budget::default(),
            telemetry: Arc::clone(&telemetry),
        },
    )?;
    let (mesh_tx, mesh_rx) = mpsc::channel(4096);
    let (events_tx, events_rx) = mpsc::channel(4096);
    let (agh_events_tx, agh_events_rx) = mpsc::channel(4096);
    let (agh_tx, agh_rx) = mpsc::channel(4096);
    let (listening_tx, mut listening_rx) = mpsc::channel(16);

    let agh_listener = bind("agh", config.agh_listen).await?;
    let http_listener = bind("http", config.http_listen).await?;
    let rpc_listener = bind("rpc", config.rpc_listen).await?;
    let agtp_listener = bind("agtp", config.agtp_listen).await?;
    let agtp_face = {
        let (c, s) = (config.clone(), store.clone());
        tokio::task::spawn_blocking(move || faces::agtp::prepare(&c, s))
            .await
            .map_err(|e| NodeError::Agtp(e.to_string()))?
            .map_err(NodeError::Agtp)?
    };
    let tokens = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let (hs_tx, hs_rx) = mpsc::channel(4096);
    let restored = hyperspace::Restored {
        snapshots: load_hs_sessions(&store).await?,
        tools: load_hs_tools(&store).await?,
        records: read_store(&store, store::Store::hs_records).await?,
    };
    hyperspace::restore_tokens(&tokens, &restored.snapshots);
    let links = faces::rpc::Links::default();
    let payments = {
        let d = hyperspace::payments::PaymentSettings::default();
        let settings = hyperspace::payments::PaymentSettings {
            wallet_file: config
                .payments
                .wallet_key_file
                .clone()
                .unwrap_or_else(|| d.wallet_file.clone()),
            challenge_ttl: config
                .payments
                .challenge_ttl_secs
                .map_or(d.challenge_ttl, Duration::from_secs),
            ..d
        };
        let wiring = hyperspace::payments::Wiring {
            peer_id: mesh.peer_id().to_string(),
            key: keys::signing_key(&keypair)?,
            mesh: mesh_tx.clone(),
        };
        let (s, data) = (store.clone(), config.data.clone());
        tokio::task::spawn_blocking(move || {
            hyperspace::payments::prepare(&data, s, settings, wiring)
        })
        .await
        .map_err(|e| NodeError::Payments(e.to_string()))?
        .map_err(NodeError::Payments)?
    };
    tracing::info!(wallet = payments.wallet_address(), "payments wallet");
    let (pay_tx, pay_rx) = mpsc::channel(1024);
    let hs_task = tokio::spawn(hyperspace::run(
        store.clone(),
        Arc::clone(&tokens),
        restored,
        hyperspace::HsWiring {
            peer_id: mesh.peer_id().to_string(),
            key: keys::signing_key(&keypair)?,
            links: links.clone(),
            mesh: mesh_tx.clone(),
            inputs_tx: hs_tx.clone(),
            inputs: hs_rx,
            long_calls: hyperspace::LongCallSettings {
                workers: config.rpc_guard_workers,
                budget: config.rpc_guard_budget,
                ..hyperspace::LongCallSettings::default()
            },
            payments: pay_tx.clone(),
            wallet_address: Some(payments.wallet_address()),
        },
    ));
    let (mem_tx, mem_rx) = mpsc::channel(4096);
    let memory = {
        let data = config.data.clone();
        let settings = hyperspace::memory::MemorySettings {
            serve: config.memory.serve,
            embedder: hyperspace::memory::EmbedderChoice::from_config(
                &config.memory.embedder,
                config.memory.endpoint.base_url.as_deref(),
                config.memory.endpoint.model.as_deref(),
                config.memory.endpoint.api_key.as_deref(),
            )
            .map_err(NodeError::Memory)?,
            model_dir: agora_embed::model_dir(&config.data),
            workers: config.memory.workers,
            max_memories: config.memory.max_memories,
            peer_rate: config.memory.peer_rate,
            ..hyperspace::memory::MemorySettings::default()
        };
        let (s, pid, key, m) = (
            store.clone(),
            mesh.peer_id().to_string(),
            keys::signing_key(&keypair)?,
            mesh_tx.clone(),
        );
        tokio::task::spawn_blocking(move || {
            hyperspace::memory::prepare(&data, s, settings, &pid, key, m)
        })
        .await
        .map_err(|e| NodeError::Memory(e.to_string()))?
        .map_err(NodeError::Memory)?
    };
    let embedder = memory.embedder();
    if embedder == agora_embed::Lexical::ID {
        tracing::warn!(
            "memory: no MiniLM model installed, embedding with the built-in lexical embedder \
             (install the model with `agora memory install-model`)"
        );
    } else {
        tracing::info!(embedder, "memory embedder");
    }
    let learning_embedder = memory.default_embedder();
    tokio::spawn(hyperspace::memory::run(memory, mem_rx));
    let (learn_tx, learn_rx) = mpsc::channel(1024);
    let learning = {
        let settings = hyperspace::learning::LearningSettings {
            max_playbooks: config.learning.max_playbooks,
            playbook: agora_hyperspace::learning::PlaybookLimits {
                max_bullets: config.learning.max_bullets,
                ..agora_hyperspace::learning::PlaybookLimits::default()
            },
            reflector: match config.learning.reflector.as_str() {
                "openai" => {
                    let e = &config.learning.endpoint;
                    hyperspace::learning::ReflectorChoice::OpenAi(
                        hyperspace::learning::ChatConfig {
                            base_url: e.base_url.clone().unwrap_or_default(),
                            model: e.model.clone().unwrap_or_default(),
                            api_key: e.api_key.clone(),
                            timeout: Duration::from_millis(config.learning.timeout_ms),
                        },
                    )
                }
                _ => hyperspace::learning::ReflectorChoice::Builtin,
            },
            ..hyperspace::learning::LearningSettings::default()
        };
        let (s, rt) = (store.clone(), tokio::runtime::Handle::current());
        tokio::task::spawn_blocking(move || {
            hyperspace::learning::prepare(s, settings, Some(learning_embedder), rt)
        })
        .await
        .map_err(|e| NodeError::Learning(e.to_string()))?
        .map_err(NodeError::Learning)?
    };
    tokio::spawn(hyperspace::learning::run(learning, learn_rx));
    let (imp_tx, imp_rx) = mpsc::channel(1024);
    let improving = {
        let c = &config.improving;
        let settings =
            hyperspace::improving::ImprovingSettings {
                share: c.share,
                task_types: c.task_types.clone(),
                max_library: c.max_library,
                max_task_types: c.max_task_types,
                min_reward: c.min_reward,
                chat: c.endpoint.base_url.as_ref().map(|base_url| {
                    hyperspace::learning::ChatConfig {
                        base_url: base_url.clone(),
                        model: c.endpoint.model.clone().unwrap_or_default(),
                        api_key: c.endpoint.api_key.clone(),
                        timeout: Duration::from_millis(c.timeout_ms),
                    }
                }),
                ..hyperspace::improving::ImprovingSettings::default()
            };
        let wiring = hyperspace::improving::Wiring {
            peer_id: mesh.peer_id().to_string(),
            key: keys::signing_key(&keypair)?,
            mesh: mesh_tx.clone(),
            runtime: tokio::runtime::Handle::current(),
        };
        let s = store.clone();
        tokio::task::spawn_blocking(move || hyperspace::improving::prepare(s, settings, wiring))
            .await
            .map_err(|e| NodeError::Improving(e.to_string()))?
            .map_err(NodeError::Improving)?
    };
    tokio::spawn(hyperspace::improving::run(improving, imp_rx));
    tokio::spawn(hyperspace::payments::run(payments, pay_rx));
    let mut event_routes = hyperspace::event_routes(&hs_tx);
    event_routes.extend(hyperspace::memory::event_routes(&mem_tx));
    event_routes.extend(hyperspace::improving::event_routes(&imp_tx));
    event_routes.extend(hyperspace::payments::event_routes(&pay_tx));
    let agh_events = routes::Sink::new(agh_events_tx, routes::Delivery::Wait, Some);
    tokio::spawn(routes::EventRouter::new(event_routes, agh_events).run(events_rx));
    let (closed_tx, mut closed_rx) = mpsc::channel::<u64>(256);
    let hs_closed = hs_tx.clone();
    tokio::spawn(async move {
        while let Some(conn) = closed_rx.recv().await {
            if hs_closed
                .send(hyperspace::Input::Closed(conn))
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let (calls_tx, calls_rx) = mpsc::channel::<call::Call>(4096);
    let call_router = routes::CallRouter::new(
        vec![
            hyperspace::memory::call_route(&mem_tx),
            hyperspace::learning::call_route(&learn_tx),
            hyperspace::improving::call_route(&imp_tx),
            hyperspace::payments::call_route(&pay_tx),
        ],
        hyperspace::call_route(&hs_tx),
    );
    tokio::spawn(call_router.run(calls_rx));

    let peer_id = mesh.peer_id().to_string();
    let mesh_task = tokio::spawn(mesh::run(mesh, mesh_rx, events_tx));
    let nats = match &config.agh.nats {
        Some(n) => {
            let bridge = faces::nats::Bridge::connect(n).await?;
            let (cmd_tx, cmd_rx) = mpsc::channel(faces::nats::QUEUE);
            let (msg_tx, msg_rx) = mpsc::channel(faces::nats::QUEUE);
            tokio::spawn(bridge.run(cmd_rx, msg_tx));
            Some((cmd_tx, msg_rx))
        }
        None => None,
    };
    let agh_task = tokio::spawn(agh::run(
        agh::AghSettings {
            interactions,
            greet_interval: config.greet_interval,
            policy: ValidationPolicy {
                replay_age: config.agh.replay_age,
                reference_admission: config.agh.reference_admission,
            },
            max_channels: config.agh.max_channels,
            telemetry: Some(Arc::clone(&telemetry)),
        },
        store.clone(),
        catalogs,
        agh::Wiring {
            inputs: agh_rx,
            mesh_events: agh_events_rx,
            mesh: mesh_tx.clone(),
            nats,
            listening: listening_tx,
        },
    ));

    // The p2p listener reports its address asynchronously; print it before the others so that
    // a script reading the first lines finds the node's identity first.
    if let Some(addr) = listening_rx.recv().await {
        announce("p2p", &addr.to_string(), false);
    }
    tokio::spawn(async move {
        while let Some(addr) = listening_rx.recv().await {
            announce("p2p", &addr.to_string(), false);
        }
    });

    let agh_addr = local_addr("agh", &agh_listener, config.agh_listen)?;
    let http_addr = local_addr("http", &http_listener, config.http_listen)?;
    let rpc_addr = local_addr("rpc", &rpc_listener, config.rpc_listen)?;
    let agtp_addr = local_addr("agtp", &agtp_listener, config.agtp_listen)?;
    let faces = vec![
        ("agh", format!("ws://{agh_addr}/agh/v0")),
        ("rpc", format!("ws://{rpc_addr}")),
        ("http", format!("http://{http_addr}")),
        ("agtp", format!("agtp://{agtp_addr}")),
    ];
    for (face, addr) in &faces {
        // of the faces only AGTP can be served over TLS (1.3) by the node itself
        announce(face, addr, *face == "agtp" && agtp_face.tls.is_some());
    }
    tracing::info!(
        peer_id = %peer_id,
        version = env!("CARGO_PKG_VERSION"),
        data_dir = %config.data.display(),
        startup_ms = started.elapsed().as_secs_f64() * 1e3,
        "node started"
    );
    let state = faces::state::AppState {
        agh: agh_tx,
        mesh: mesh_tx,
        hyperspace: hs_tx,
        memory: mem_tx,
        learning: learn_tx,
        improving: imp_tx,
        payments: pay_tx,
        conn_ids: Arc::new(AtomicU64::new(1)),
        started,
        faces: Arc::new(faces),
        ping_every: faces::serve::ws_ping_interval(config.faces.ws_idle_timeout),
        telemetry: Arc::clone(&telemetry),
        ans: Arc::clone(&agtp_face.ans),
        data_dir: config.data.display().to_string().into(),
        snapshot: faces::http::dashboard::Cache::default(),
    };

    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let access = faces::serve::Access {
        api_key: config.api_key.as_deref().map(Into::into),
        public_paths: &[],
        allowed_origins: config.allowed_origins.clone().into(),
        allowed_hosts: config.allowed_hosts.clone().into(),
        own_http_port: http_addr.port(),
    };
    let serve = |listener: TcpListener, name: &'static str, router: axum::Router, access| {
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
        let face = faces::serve::Face {
            name,
            router,
            limits: config.faces,
            access,
        };
        tokio::spawn(faces::serve::serve(listener, face, async move {
            let _ = stop.recv().await;
        }))
    };
    let agh_server = serve(
        agh_listener,
        "agh",
        faces::agh_ws::agh_face(state.clone()),
        access.clone(),
    );
    let http_server = serve(
        http_listener,
        "http",
        faces::http::http_face(state.clone()),
        faces::serve::Access {
            public_paths: if config.public_reads {
                faces::http::READ_ONLY_PATHS
            } else {
                faces::http::ASSET_PATHS
            },
            ..access.clone()
        },
    );
    let mut rpc_state = faces::rpc::RpcState::new(
        calls_tx,
        config.api_key.clone(),
        rpc_addr.ip().is_loopback(),
        tokens,
        links,
        Some(closed_tx),
    );
    rpc_state.conn_rate = config.rpc_conn_rate;
    rpc_state.key_rate = config.rpc_key_rate;
    rpc_state.conn_frames = config.rpc_conn_frames;
    rpc_state.conn_bytes = config.rpc_conn_bytes;
    rpc_state.total_bytes = config.rpc_total_bytes;
    rpc_state.write_timeout = config.rpc_write_timeout;
    rpc_state.ping_every = faces::serve::ws_ping_interval(config.faces.ws_idle_timeout);
    rpc_state.telemetry = Some(Arc::clone(&telemetry));
    // The JSON-RPC face checks its credentials itself (the API key or a session token).
    let rpc_server = serve(
        rpc_listener,
        "rpc",
        faces::rpc::face(rpc_state),
        faces::serve::Access {
            api_key: None,
            ..access
        },
    );
    let refresh_task = tokio::spawn(Arc::clone(&agtp_face.ans).run_refresh());
    let agtp_server = {
        let mut stop = stop_tx.subscribe();
        tokio::spawn(faces::agtp::listener::serve(
            agtp_listener,
            faces::agtp::listener::ListenerConfig {
                tls: agtp_face.tls,
                server_id: agtp_face.ans.name().to_owned(),
                ..faces::agtp::listener::ListenerConfig::default()
            },
            Arc::new(faces::agtp::listener::CountedAgtp(
                ans::AnsHandler(Arc::clone(&agtp_face.ans)),
                Arc::clone(&telemetry),
            )),
            async move {
                let _ = stop.recv().await;
            },
        ))
    };
    drop(state);

    shutdown.await;
    tracing::info!(uptime_secs = started.elapsed().as_secs(), "shutting down");
    let _ = stop_tx.send(());
    // Open WebSocket sessions end when their sockets close; give listeners a moment, then stop.
    let grace = Duration::from_secs(5);
    let _ = tokio::time::timeout(grace, agh_server).await;
    let _ = tokio::time::timeout(grace, http_server).await;
    let _ = tokio::time::timeout(grace, rpc_server).await;
    let _ = tokio::time::timeout(grace, agtp_server).await;
    refresh_task.abort();
    agh_task.abort();
    hs_task.abort();
    mesh_task.abort();
    let _ = agh_task.await;
    let _ = hs_task.await;
    let _ = mesh_task.await;
    drop(store);
    tracing::info!("node stopped");
    Ok(())
}

fn local_addr(
    face: &'static str,
    listener: &TcpListener,
    addr: std::net::SocketAddr,
) -> Result<std::net::SocketAddr, NodeError> {
    listener
        .local_addr()
        .map_err(|source| NodeError::Listen { face, addr, source })
}

/// Runs a blocking store read off the async threads.
async fn read_store<T: Send + 'static>(
    store: &store::Store,
    read: fn(&store::Store) -> Result<T, store::StoreError>,
) -> Result<T, NodeError> {
    let s = store.clone();
    let result = tokio::task::spawn_blocking(move || read(&s))
        .await
        .map_err(|e| store::StoreError::Db {
            path: std::path::PathBuf::from(store::DB_FILE),
            message: e.to_string(),
        })?;
    Ok(result?)
}

async fn load_catalogs(store: &store::Store) -> Result<HashMap<String, Catalog>, NodeError> {
    let rows = read_store(store, store::Store::catalogs).await?;
    let mut out = HashMap::new();
    for (peer_id, json) in rows {
        match Catalog::from_json(&json) {
            Ok(c) => {
                out.insert(peer_id, c);
            }
            Err(e) => tracing::warn!(%peer_id, error = %e, "stored catalog is unreadable; ignored"),
        }
    }
    Ok(out)
}

/// Parses stored JSON rows, skipping (and logging) unreadable ones.
fn parse_rows<T: serde::de::DeserializeOwned>(rows: Vec<(String, String)>, what: &str) -> Vec<T> {
    rows.into_iter()
        .filter_map(|(id, json)| match serde_json::from_str(&json) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(%id, error = %e, what, "a stored row is unreadable; ignored");
                None
            }
        })
        .collect()
}

async fn load_hs_sessions(store: &store::Store) -> Result<Vec<hyperspace::Snapshot>, NodeError> {
    let rows = read_store(store, store::Store::hs_sessions).await?;
    Ok(parse_rows(rows, "Hyperspace session"))
}

async fn load_hs_tools(
    store: &store::Store,
) -> Result<Vec<agora_hyperspace::tool::LocalTool>, NodeError> {
    let rows = read_store(store, store::Store::hs_tools).await?;
    Ok(parse_rows(rows, "Hyperspace tool"))
}

async fn load_interactions(
    store: &store::Store,
) -> Result<Vec<(String, String, agora_agh::lifecycle::Interaction)>, NodeError> {
    let rows = read_store(store, store::Store::interactions).await?;
    Ok(rows
        .into_iter()
        .filter_map(|(channel, iid, json)| match agh::parse_interaction(&json) {
            Some(i) => Some((channel, iid, i)),
            None => {
                tracing::warn!(%channel, %iid, "stored interaction is unreadable; ignored");
                None
            }
        })
        .collect())
}

/// Completes on SIGINT or SIGTERM. The handlers are installed when this function is called (not
/// when the future is first polled), so a signal that arrives while the node starts is not lost
/// to the default action.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let int = signal(SignalKind::interrupt());
        let term = signal(SignalKind::terminate());
        async move {
            match (int, term) {
                (Ok(mut int), Ok(mut term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
