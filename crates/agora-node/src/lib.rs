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
//! | faces | [`faces`] | how agents, tools and operators reach the node: the serving layer, the AGH WebSocket, the HTTP API (dashboard, `/metrics`), JSON-RPC, the AGTP listener, TLS and client, the NATS bridge, and serving them all ([`faces::serving`]) |
//! | services | [`agh`] | the AGH service task (router, presence, lifecycle, delivery) |
//! | | [`ans`] | the Agent Name Service (DISCOVER, DESCRIBE, lifecycle, index, refresh, federation) |
//! | | [`hyperspace`] | the Hyperspace service task (state, guard, recursive, tool; `state`, `guard`, `tool/`), one folder per primitive task (memory, learning, improving, payments), and their shared skeleton (`service`) |
//! | | [`bridge`] | the bridges (spec §10): MCP servers' tools and A2A agents' skills as tools of this node |
//! | | [`directory`] | one directory behind every face: every agent and tool from AGH, the ANS, Hyperspace and the bridges; `directory.search`, the AI Catalog |
//! | | [`info`] | `node.info`: the PeerId, wallet, faces and embedder, for clients |
//! | | [`call`] | a JSON-RPC call as a face hands it to a service |
//! | | [`routes`] | the routers: calls by method prefix, mesh events by topic, protocol or kind, to the service that declares them |
//! | | [`openrpc`] | the OpenRPC document of the JSON-RPC face, built from every service's method table; `rpc.discover` |
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
pub mod bridge;
pub mod call;
pub mod clock;
pub mod config;
pub mod directory;
pub mod faces;
pub mod hyperspace;
pub mod info;
pub mod keys;
pub mod mesh;
pub mod openrpc;
pub mod routes;
pub mod store;
pub mod telemetry;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

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
    /// A bridge could not start (`[bridge]`: its keys).
    #[error("bridge: {0}")]
    Bridge(String),
    /// A listener could not be bound or failed.
    #[error(transparent)]
    Listen(#[from] faces::serving::ListenError),
}

/// Prints the stable `listening on <face> <addr>` line and flushes, so that scripts reading a
/// pipe see it at once; logs it as the `listening` event (`face`, `addr`, `tls`).
fn announce(face: &str, addr: &str, tls: bool) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on {face} {addr}");
    let _ = out.flush();
    tracing::info!(face, addr, tls, "listening");
}

/// Runs a node until SIGINT or SIGTERM.
pub async fn run(config: Config) -> Result<(), NodeError> {
    run_until(config, shutdown_signal()).await
}

/// Runs a node until `shutdown` completes: the store, the mesh, each service, the routers
/// between them, then the faces.
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    use hyperspace::{improving, learning, memory, payments};
    let started = Instant::now();
    // Nothing is created (key, database, listeners) for a configuration that cannot run.
    config.validate()?;
    // The faces' ports first: a node that cannot listen writes no key and no database.
    let listeners = faces::serving::Listeners::bind(&config).await?;
    let keypair = keys::load_or_create(&config.data)?;
    let store = store::Store::open_async(&config.data).await?;
    let telemetry = Arc::new(telemetry::Telemetry::new());
    store.observe_commits(telemetry.store_commit.clone());
    let clocks = Arc::new(clock::PeerClocks::default());
    let mesh = mesh::start(&keypair, &mesh_config(&config, &telemetry, &clocks))?;
    let peer_id = mesh.peer_id().to_string();
    let (mesh_tx, mesh_rx) = mpsc::channel(4096);
    let (events_tx, events_rx) = mpsc::channel(4096);
    let (listening_tx, listening_rx) = mpsc::channel(16);
    let agtp_face = faces::agtp::start(&config, store.clone())
        .await
        .map_err(NodeError::Agtp)?;
    let key = || keys::signing_key(&keypair);
    let (pid, m) = (|| peer_id.clone(), || mesh_tx.clone());
    let pay = payments::Wiring {
        peer_id: pid(),
        key: key()?,
        mesh: m(),
    };
    let pay = (payments::start(&config, store.clone(), pay).await).map_err(NodeError::Payments)?;
    let (bridges, bridge_calls) = bridge::channels();
    let bridge::BridgeCalls {
        mcp: mcp_calls,
        a2a: a2a_calls,
    } = bridge_calls;
    let hs = hyperspace::Wiring {
        peer_id: pid(),
        key: key()?,
        mesh: m(),
        payments: pay.tx.clone(),
        wallet_address: pay.wallet_address.clone(),
        long_calls: hyperspace::LongCallSettings {
            workers: config.rpc.guard_workers,
            budget: config.rpc.guard_budget,
            ..hyperspace::LongCallSettings::default()
        },
        bridges,
    };
    let hs = hyperspace::start(store.clone(), hs).await?;
    let mcp = bridge::mcp::start(bridge::mcp::Wiring {
        peer_id: pid(),
        hs: hs.tx.clone(),
        store: store.clone(),
        calls: mcp_calls,
        config: config.bridge.mcp.clone(),
    })
    .await;
    let a2a = bridge::a2a::Wiring {
        key: key()?,
        mesh: m(),
        hyperspace: hs.tx.clone(),
        calls: a2a_calls,
        keys: config.bridge.a2a_keys.clone(),
        agents: config.bridge.a2a.clone(),
    };
    let a2a = bridge::a2a::start(a2a).await.map_err(NodeError::Bridge)?;
    let urls = listeners.urls();
    let rpc_url = urls
        .iter()
        .find(|(f, _)| *f == "rpc")
        .map_or(openrpc::DEFAULT_RPC_URL, |(_, u)| u.as_str());
    let openrpc_doc = Arc::new(openrpc::document(rpc_url));
    let discover = openrpc::start(Arc::clone(&openrpc_doc));
    let http_url = urls
        .iter()
        .find(|(f, _)| *f == "http")
        .map_or("", |(_, u)| u.as_str());
    let a2a_face = faces::a2a::A2aFace::new(faces::a2a::Settings {
        data: &config.data,
        store: store.clone(),
        hyperspace: hs.tx.clone(),
        peer_id: &peer_id,
        http_url,
        ttl: Duration::from_secs(config.bridge.a2a_task_ttl_secs),
        max_tasks: config.bridge.a2a_max_tasks,
    })
    .await
    .map_err(NodeError::Bridge)?;
    let mem = memory::Wiring {
        peer_id: pid(),
        key: key()?,
        mesh: m(),
    };
    let mem = (memory::start(&config, store.clone(), mem).await).map_err(NodeError::Memory)?;
    let learn = learning::start(&config, store.clone(), Arc::clone(&mem.embedder));
    let learn = learn.await.map_err(NodeError::Learning)?;
    let runtime = tokio::runtime::Handle::current();
    let imp = improving::Wiring {
        peer_id: pid(),
        key: key()?,
        mesh: m(),
        runtime,
        telemetry: Arc::clone(&telemetry),
    };
    let imp =
        (improving::start(&config, store.clone(), imp).await).map_err(NodeError::Improving)?;
    let p2p = info::P2pAddresses::default();
    let info = info::start(info::NodeInfo {
        peer_id: pid(),
        wallet_address: pay.wallet_address.clone(),
        faces: {
            let mut faces = listeners.urls();
            faces.push(("mcp", format!("{http_url}{}", faces::mcp::PATH)));
            faces.push(("a2a", format!("{http_url}{}", faces::a2a::agent::CARD_PATH)));
            faces
        },
        p2p: p2p.clone(),
        embedder: (mem.embedder.id().to_owned(), mem.embedder.dim()),
    });
    let (calls_tx, calls_rx) = mpsc::channel::<call::Call>(4096);
    let mesh_task = tokio::spawn(mesh::run(mesh, mesh_rx, events_tx));
    let nats = start_nats(&config).await?;
    let agh = agh::Wiring {
        mesh: m(),
        nats,
        listening: listening_tx,
        telemetry: Arc::clone(&telemetry),
    };
    let agh = agh::start(&config, store.clone(), agh).await?;
    let directory = directory::start(directory::Wiring {
        peer_id: pid(),
        embedder: Arc::clone(&mem.embedder),
        agh: agh.tx.clone(),
        hyperspace: hs.tx.clone(),
        ans: Arc::clone(&agtp_face.ans),
        mesh: m(),
        offline_ttl_ms: config.directory.offline_ttl_ms(),
        faces: (!http_url.is_empty(), !http_url.is_empty()),
        a2a_agents: config
            .bridge
            .a2a
            .iter()
            .filter_map(|a| {
                let url = a.url.as_deref()?.trim_end_matches('/');
                let name = a.name.clone().unwrap_or_else(|| url.to_owned());
                Some((name, format!("{url}/.well-known/agent-card.json")))
            })
            .collect(),
    });
    let state = faces::state::AppState {
        agh: agh.tx,
        mesh: mesh_tx,
        hyperspace: hs.tx,
        memory: mem.tx,
        learning: learn,
        improving: imp,
        payments: pay.tx,
        conn_ids: Arc::new(AtomicU64::new(1)),
        started,
        faces: Arc::new(listeners.urls()),
        ping_every: faces::serve::ws_ping_interval(config.ws_idle_timeout),
        telemetry: Arc::clone(&telemetry),
        ans: Arc::clone(&agtp_face.ans),
        data_dir: config.data.display().to_string().into(),
        snapshot: faces::http::dashboard::Cache::default(),
        a2a: a2a_face,
        openrpc: openrpc_doc,
        directory,
        clocks,
        agh_in_flight: agh::InFlight::default(),
    };
    spawn_routers(
        &state,
        (&mcp, &a2a, &info, &discover),
        agh.events,
        calls_rx,
        events_rx,
    );
    announce_all(listening_rx, &state.faces, agtp_face.tls.is_some(), p2p).await;
    tracing::info!(
        peer_id = %peer_id,
        version = env!("CARGO_PKG_VERSION"),
        data_dir = %config.data.display(),
        startup_ms = started.elapsed().as_secs_f64() * 1e3,
        "node started"
    );
    let rpc = faces::serving::RpcWiring {
        calls: calls_tx,
        tokens: hs.tokens,
        links: hs.links,
        closed: hs.closed,
    };
    let serving = faces::serving::start(&config, listeners, state, rpc, agtp_face);

    shutdown.await;
    tracing::info!(uptime_secs = started.elapsed().as_secs(), "shutting down");
    serving.stop().await;
    for task in [agh.task, hs.task, mesh_task] {
        task.abort();
        let _ = task.await;
    }
    drop(store);
    tracing::info!("node stopped");
    Ok(())
}

/// Spawns the routers: JSON-RPC calls to the services by method prefix, mesh events to the
/// services that declare them, the rest to the AGH service (`agh_events`).
fn spawn_routers(
    services: &faces::state::AppState,
    (mcp, a2a, info, discover): (
        &mpsc::Sender<bridge::mcp::Input>,
        &mpsc::Sender<bridge::a2a::Input>,
        &mpsc::Sender<call::Call>,
        &mpsc::Sender<call::Call>,
    ),
    agh_events: mpsc::Sender<mesh::Event>,
    calls: mpsc::Receiver<call::Call>,
    events: mpsc::Receiver<mesh::Event>,
) {
    use hyperspace::{improving, learning, memory, payments};
    let call_routes = vec![
        memory::call_route(&services.memory),
        learning::call_route(&services.learning),
        improving::call_route(&services.improving),
        payments::call_route(&services.payments),
        bridge::mcp::call_route(mcp),
        bridge::a2a::call_route(a2a),
        info::call_route(info),
        openrpc::call_route(discover),
        directory::call_route(&services.directory),
    ];
    let rest = hyperspace::call_route(&services.hyperspace);
    tokio::spawn(routes::CallRouter::new(call_routes, rest).run(calls));
    let mut event_routes = hyperspace::event_routes(&services.hyperspace);
    event_routes.extend(memory::event_routes(&services.memory));
    event_routes.extend(improving::event_routes(&services.improving));
    event_routes.extend(payments::event_routes(&services.payments));
    event_routes.extend(bridge::a2a::event_routes(a2a));
    event_routes.extend(directory::event_routes(&services.directory));
    let rest = routes::Sink::new(agh_events, routes::Delivery::Wait, Some);
    tokio::spawn(routes::EventRouter::new(event_routes, rest).run(events));
}

/// Announces the p2p listener (it reports its address asynchronously; printed before the others
/// so that a script reading the first lines finds the node's identity first, and again for each
/// later address), then each face; `node.info` lists the p2p addresses too (`p2p`).
async fn announce_all(
    mut listening: mpsc::Receiver<libp2p::Multiaddr>,
    faces: &[(&'static str, String)],
    agtp_tls: bool,
    p2p: info::P2pAddresses,
) {
    if let Some(addr) = listening.recv().await {
        announce("p2p", &addr.to_string(), false);
        p2p.push(addr.to_string());
    }
    tokio::spawn(async move {
        while let Some(addr) = listening.recv().await {
            announce("p2p", &addr.to_string(), false);
            p2p.push(addr.to_string());
        }
    });
    for (face, addr) in faces {
        // of the faces only AGTP can be served over TLS (1.3) by the node itself
        announce(face, addr, *face == "agtp" && agtp_tls);
    }
}

/// The mesh's settings: `config`'s addresses and limits, the Hyperspace gossip gate inline.
fn mesh_config(
    config: &Config,
    telemetry: &Arc<telemetry::Telemetry>,
    clocks: &Arc<clock::PeerClocks>,
) -> mesh::MeshConfig {
    mesh::MeshConfig {
        listen: config.p2p_listen.clone(),
        bootstrap: config.bootstrap.clone(),
        heartbeat: Duration::from_millis(500),
        limits: config.peers(),
        validators: vec![(
            hyperspace::TOPIC_PREFIX.to_owned(),
            Arc::new(hyperspace::GossipGate::new(
                Arc::clone(clocks),
                Some(Arc::clone(telemetry)),
            )),
        )],
        budget: mesh::topics::Budget::default(),
        telemetry: Arc::clone(telemetry),
    }
}

/// Connects the NATS bridge when `config` names one: commands out, messages in.
async fn start_nats(
    config: &Config,
) -> Result<
    Option<(
        mpsc::Sender<faces::nats::Command>,
        mpsc::Receiver<faces::nats::Message>,
    )>,
    NodeError,
> {
    let Some(n) = config.agh.nats() else {
        return Ok(None);
    };
    let bridge = faces::nats::Bridge::connect(n).await?;
    let (cmd_tx, cmd_rx) = mpsc::channel(faces::nats::QUEUE);
    let (msg_tx, msg_rx) = mpsc::channel(faces::nats::QUEUE);
    tokio::spawn(bridge.run(cmd_rx, msg_tx));
    Ok(Some((cmd_tx, msg_rx)))
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
