//! `agora node`: run a node (a stable contract: flags and `listening on` lines).

use std::path::PathBuf;
use std::process::ExitCode;

use agora_node::config::{Config, Overrides};
use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct NodeArgs {
    /// Configuration file (default: ./agora.toml when present).
    #[arg(long, value_name = "FILE", env = "AGORA_CONFIG")]
    config: Option<PathBuf>,
    /// Data directory (node key and database). Default: ./agora-data.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// libp2p listen address (repeatable). Default: /ip4/127.0.0.1/tcp/4001.
    #[arg(long = "p2p-listen", value_name = "MULTIADDR")]
    p2p_listen: Vec<String>,
    /// AGH WebSocket face. Default: 127.0.0.1:4410.
    #[arg(long = "agh-listen", value_name = "ADDR")]
    agh_listen: Option<String>,
    /// Hyperspace JSON-RPC face. Default: 127.0.0.1:3100.
    #[arg(long = "rpc-listen", value_name = "ADDR")]
    rpc_listen: Option<String>,
    /// AGTP face. Default: 127.0.0.1:4480.
    #[arg(long = "agtp-listen", value_name = "ADDR")]
    agtp_listen: Option<String>,
    /// Serve the AGTP face over TLS even on a loopback address.
    #[arg(long = "agtp-tls")]
    agtp_tls: bool,
    /// Serve the AGTP face as plain AGTP even beyond loopback (no TLS; for testing only).
    #[arg(long)]
    insecure: bool,
    /// HTTP API face. Default: 127.0.0.1:4411.
    #[arg(long = "http-listen", value_name = "ADDR")]
    http_listen: Option<String>,
    /// A node to join (repeatable), e.g. /ip4/127.0.0.1/tcp/4001/p2p/12D3Koo…
    #[arg(long, value_name = "MULTIADDR")]
    bootstrap: Vec<String>,
    /// Connection manager: trim down to this many connected peers. Default: 8.
    #[arg(long = "peers-low", value_name = "N")]
    peers_low: Option<usize>,
    /// Connection manager: trim only when more than this many peers are connected. Default: 16.
    #[arg(long = "peers-high", value_name = "N")]
    peers_high: Option<usize>,
    /// AGH greet interval in seconds (remote presence lasts twice as long). Default: 30.
    #[arg(long = "greet-interval", value_name = "SECS")]
    greet_interval: Option<u64>,
    /// Connections served at once by each HTTP and WebSocket face (beyond: 503). Default: 1024.
    #[arg(long = "max-connections", value_name = "N")]
    max_connections: Option<usize>,
    /// Seconds for a request's headers (or a WebSocket upgrade) to arrive; also how long an HTTP
    /// connection may wait for its next request. Default: 10.
    #[arg(long = "header-timeout", value_name = "SECS")]
    header_timeout: Option<u64>,
    /// Seconds for a request's body to arrive and its answer to be ready (beyond: 408).
    /// Default: 60.
    #[arg(long = "request-timeout", value_name = "SECS")]
    request_timeout: Option<u64>,
    /// Seconds a WebSocket may go without a frame either way before it is closed. Default: 300.
    #[arg(long = "ws-idle-timeout", value_name = "SECS")]
    ws_idle_timeout: Option<u64>,
    /// A browser origin (scheme://host[:port]) allowed to open WebSockets and send changes
    /// (repeatable). The node's own HTTP face is always allowed.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// A host name (or name:port) that names this node besides localhost and its addresses
    /// (repeatable); requests for any other Host are refused with 421.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_host: Vec<String>,
    /// Answer the HTTP API's read-only endpoints (/healthz, /status, GET peers and cards)
    /// without the API key.
    #[arg(long = "public-reads")]
    public_reads: bool,
    /// Channels one agent connection may be in. Default: 64.
    #[arg(long = "agh-max-channels", value_name = "N")]
    agh_max_channels: Option<usize>,
    /// Log lines as `text` (colours only on a terminal) or `json` (one object per line).
    /// Default: text.
    #[arg(long = "log-format", value_name = "FORMAT", value_parser = ["text", "json"])]
    log_format: Option<String>,
}

pub(crate) fn run(args: NodeArgs) -> ExitCode {
    let flags = Overrides {
        data: args.data,
        p2p_listen: args.p2p_listen,
        agh_listen: args.agh_listen,
        http_listen: args.http_listen,
        rpc_listen: args.rpc_listen,
        agtp_listen: args.agtp_listen,
        bootstrap: args.bootstrap,
        peers_low: args.peers_low,
        peers_high: args.peers_high,
        greet_interval: args.greet_interval,
        nats: agora_node::config::NatsOverrides::default(),
        api_key: None,
        rpc_api_key: None,
        rpc_conn_rate: None,
        rpc_key_rate: None,
        rpc_conn_frames: None,
        rpc_conn_bytes: None,
        rpc_total_bytes: None,
        rpc_write_timeout: None,
        rpc_guard_workers: None,
        rpc_guard_budget_ms: None,
        agtp_tls: args.agtp_tls.then_some(true),
        agtp_insecure: args.insecure.then_some(true),
        max_connections: args.max_connections,
        header_timeout: args.header_timeout,
        request_timeout: args.request_timeout,
        ws_idle_timeout: args.ws_idle_timeout,
        allowed_origins: args.allow_origin,
        allowed_hosts: args.allow_host,
        public_reads: args.public_reads.then_some(true),
        agh_max_channels: args.agh_max_channels,
        log_format: args.log_format,
        ..Overrides::default()
    };
    let config = Config::load(args.config.as_deref(), Overrides::default()).and_then(|mut c| {
        c.apply(Config::env_overrides(|k| std::env::var(k).ok())?)?;
        c.apply(flags)?;
        c.validate()?;
        Ok(c)
    });
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("agora: configuration: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(level) = &config.log.level
        && let Err(e) = tracing_subscriber::EnvFilter::try_new(level)
    {
        eprintln!("agora: configuration: log.level: {level:?} is not a tracing filter ({e})");
        return ExitCode::from(2);
    }
    init_logging(&config.log);
    // jemalloc's background thread purges freed pages (after its 10 s decay) even while the node
    // is idle: the memory of closed connections goes back to the system.
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(error = %e, "cannot start jemalloc's background thread; freed memory stays with the process");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agora: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(agora_node::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ agora_node::NodeError::Config(_)) => {
            eprintln!("agora: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("agora: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What is logged when neither `RUST_LOG`, `AGORA_LOG` nor `[log] level` says.
const DEFAULT_LOG_FILTER: &str = "warn,libp2p_kad=error,async_nats=off,agora_node=info";

/// Logs to stderr: `RUST_LOG`, else `AGORA_LOG`, else `[log] level`, else the default filter;
/// text with ANSI colours only when stderr is a terminal, or JSON lines.
fn init_logging(log: &agora_node::config::LogConfig) {
    use std::io::IsTerminal as _;
    // an empty variable counts as unset
    let var = |name| std::env::var(name).ok().filter(|s| !s.trim().is_empty());
    let spec = var("RUST_LOG")
        .or_else(|| var("AGORA_LOG"))
        .or_else(|| log.level.clone())
        .unwrap_or_else(|| DEFAULT_LOG_FILTER.to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(&spec).unwrap_or_else(|e| {
        // only an environment variable can be invalid here ([log] level was checked)
        eprintln!("agora: log filter {spec:?} is not valid ({e}); using \"info\"");
        tracing_subscriber::EnvFilter::new("info")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match log.format {
        agora_node::config::LogFormat::Json => builder
            .json()
            .flatten_event(false)
            .with_current_span(false)
            .try_init(),
        agora_node::config::LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}
