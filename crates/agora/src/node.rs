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
        nats_url: None,
        rpc_api_key: None,
        rpc_conn_rate: None,
        rpc_key_rate: None,
        agtp_tls: args.agtp_tls.then_some(true),
        agtp_insecure: args.insecure.then_some(true),
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
    init_logging();
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
        Err(e) => {
            eprintln!("agora: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGORA_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,libp2p_kad=error,agora_node=info")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
