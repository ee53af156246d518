//! Node configuration: defaults, then `agora.toml`, then `AGORA_*` environment variables, then
//! command-line flags (each layer overrides the one before).
//!
//! Every listener defaults to 127.0.0.1 so that `agora node` on a fresh machine exposes nothing
//! beyond loopback. Port 0 asks the system for a free port; the node prints the port it got on a
//! `listening on <face> <addr>` line.
//!
//! A setting is declared once, as a field of its section's struct, with its default and, where
//! its Rust type is not a TOML type, how `agora.toml` writes it (`de.rs`). Each section derives
//! its layer ([`ConfigPatch`], `MemoryConfigPatch`, …: the same fields, each an `Option`) with
//! `struct-patch`; the file is read into a layer by serde, and the environment and the flags fill
//! one through [`SETTINGS`] (each setting's variable, flag and help, in `env.rs`). [`Config::apply`]
//! lays one layer over the configuration, then checks and normalises every value
//! (`Config::settle`, each number through `in_range`); [`Config::validate`] checks what depends
//! on several settings, once after the last layer.
//!
//! | file | TOML | what |
//! |---|---|---|
//! | `mod.rs` | top level | [`Config`]: the listen addresses, `data`, `bootstrap`, the peer watermarks, `greet_interval` |
//! | `faces.rs` | top level | the API key, the faces' connection limits, origins and hosts |
//! | `peers.rs` | top level | [`PeerLimits`], the connection manager's watermarks as the mesh takes them |
//! | `rpc.rs` | `[rpc]` | the JSON-RPC face's flow limits and guard workers, and their defaults |
//! | `agh.rs` | `[agh]`, `[agh.nats]` | AGH settings and the NATS bridge |
//! | `agtp.rs` | `[agtp]`, `[[agtp.peers]]` | the Agent Name Service and its listener |
//! | `memory.rs`, `learning.rs`, `improving.rs`, `payments.rs` | `[memory]` … | the primitives' services |
//! | `directory.rs` | `[directory]` | the directory service |
//! | `bridge.rs` | `[[bridge.mcp]]`, `[[bridge.a2a]]` | MCP servers and A2A agents bridged at start |
//! | `endpoint.rs` | `base_url`, `model`, `api_key` | the checks of a section's OpenAI-compatible endpoint |
//! | `log.rs` | `[log]` | log filter and format |
//! | `de.rs` | | how the file writes durations, addresses, lists and secrets |
//! | `file.rs` | all | reading `agora.toml`, its relative paths, and [`toml_keys`], every key it takes |
//! | `env.rs` | | [`SETTINGS`]: each setting's `AGORA_*` variable, flag, default and help |

mod agh;
mod agtp;
mod bridge;
mod de;
mod directory;
mod endpoint;
mod env;
mod faces;
mod file;
mod improving;
mod learning;
mod log;
mod memory;
mod payments;
mod peers;
pub mod rpc;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libp2p::Multiaddr;
use serde::Deserialize;
use struct_patch::Patch;

pub use agh::{
    AghConfig, AghConfigPatch, DEFAULT_MAX_CHANNELS, NatsConfig, NatsConfigPatch, Secret,
    nats_server_addr,
};
pub use agtp::{AgtpConfig, AgtpConfigPatch, PeerConfig};
pub use bridge::{BridgeConfig, BridgeConfigPatch};
pub use directory::{DEFAULT_OFFLINE_TTL_SECS, DirectoryConfig, DirectoryConfigPatch};
pub use env::{Kind, SETTINGS, Setting};
pub use faces::FaceLimits;
pub(crate) use faces::split_port;
pub use file::toml_keys;
pub use improving::{ImprovingConfig, ImprovingConfigPatch};
pub use learning::{LearningConfig, LearningConfigPatch};
pub use log::{LogConfig, LogConfigPatch, LogFormat};
pub use memory::{MEMORY_EMBEDDERS, MemoryConfig, MemoryConfigPatch};
pub use payments::{PaymentsConfig, PaymentsConfigPatch};
pub use peers::PeerLimits;
pub use rpc::{RpcConfig, RpcConfigPatch};

/// Default data directory.
pub const DEFAULT_DATA_DIR: &str = "agora-data";
/// Default configuration file, looked up in the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "agora.toml";

/// The node's effective configuration, in the shape of `agora.toml` (a field per key, a
/// struct per section).
#[derive(Clone, Debug, PartialEq, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "One layer of settings in the shape of `agora.toml`: [`Config`]'s fields, each an \
           `Option` (`None` leaves the layer below), derived by `struct-patch`."
))]
pub struct Config {
    /// Data directory: node key, database (`data`).
    pub data: PathBuf,
    /// libp2p listen addresses (`p2p_listen`, one or a list).
    #[patch(attribute(serde(deserialize_with = "de::multiaddrs")))]
    pub p2p_listen: Vec<Multiaddr>,
    /// AGH WebSocket face, `ws://<addr>/agh/v0` (`agh_listen`).
    #[patch(attribute(serde(deserialize_with = "de::socket_addr")))]
    pub agh_listen: SocketAddr,
    /// HTTP API face (`http_listen`).
    #[patch(attribute(serde(deserialize_with = "de::socket_addr")))]
    pub http_listen: SocketAddr,
    /// Hyperspace JSON-RPC face, `ws://<addr>` (`rpc_listen`).
    #[patch(attribute(serde(deserialize_with = "de::socket_addr")))]
    pub rpc_listen: SocketAddr,
    /// AGTP face, the Agent Name Service (`agtp_listen`).
    #[patch(attribute(serde(deserialize_with = "de::socket_addr")))]
    pub agtp_listen: SocketAddr,
    /// `[agtp]` settings.
    #[patch(nesting)]
    pub agtp: AgtpConfig,
    /// Nodes to join (`bootstrap`, one or a list).
    #[patch(attribute(serde(deserialize_with = "de::multiaddrs")))]
    pub bootstrap: Vec<Multiaddr>,
    /// The connection manager trims down to this many connected peers (`peers_low`; see
    /// [`Config::peers`]).
    pub peers_low: usize,
    /// … once more than this many are connected (`peers_high`).
    pub peers_high: usize,
    /// AGH greet interval; remote presence lives twice as long (`greet_interval`, seconds).
    #[patch(attribute(serde(deserialize_with = "de::secs")))]
    pub greet_interval: Duration,
    /// `[agh]` settings.
    #[patch(nesting)]
    pub agh: AghConfig,
    /// The node's API key (`api_key`, `AGORA_API_KEY`; `[rpc] api_key` and `AGORA_RPC_API_KEY`
    /// are older names of the same setting): required by every HTTP and WebSocket face once
    /// set, and required to bind any of them beyond loopback.
    #[patch(skip_wrap)]
    pub api_key: Option<String>,
    /// Connections served at once by each HTTP and WebSocket face (`max_connections`; see
    /// [`Config::faces`]).
    pub max_connections: usize,
    /// Time for a request's headers to arrive (`header_timeout`, seconds).
    #[patch(attribute(serde(deserialize_with = "de::secs")))]
    pub header_timeout: Duration,
    /// Time for a request's body to arrive and its answer to be ready (`request_timeout`,
    /// seconds).
    #[patch(attribute(serde(deserialize_with = "de::secs")))]
    pub request_timeout: Duration,
    /// How long a WebSocket may go without a frame either way (`ws_idle_timeout`, seconds).
    #[patch(attribute(serde(deserialize_with = "de::secs")))]
    pub ws_idle_timeout: Duration,
    /// Browser origins allowed to open WebSockets and send changes, besides the node's own
    /// pages (`allowed_origins`; lowercase `scheme://host[:port]`).
    #[patch(attribute(serde(deserialize_with = "de::one_or_many")))]
    pub allowed_origins: Vec<String>,
    /// Host names that name this node besides loopback ones (`allowed_hosts`; lowercase
    /// `name` or `name:port`).
    #[patch(attribute(serde(deserialize_with = "de::one_or_many")))]
    pub allowed_hosts: Vec<String>,
    /// The HTTP API's read-only endpoints answer without the API key (`public_reads`).
    pub public_reads: bool,
    /// `[rpc]` settings.
    #[patch(nesting)]
    pub rpc: RpcConfig,
    /// `[memory]` settings.
    #[patch(nesting)]
    pub memory: MemoryConfig,
    /// `[learning]` settings.
    #[patch(nesting)]
    pub learning: LearningConfig,
    /// `[improving]` settings.
    #[patch(nesting)]
    pub improving: ImprovingConfig,
    /// `[payments]` settings.
    #[patch(nesting)]
    pub payments: PaymentsConfig,
    /// `[bridge]` settings: MCP servers and A2A agents bridged at start.
    #[patch(nesting)]
    pub bridge: BridgeConfig,
    /// `[directory]` settings.
    #[patch(nesting)]
    pub directory: DirectoryConfig,
    /// `[log]` settings.
    #[patch(nesting)]
    pub log: LogConfig,
}

impl Default for Config {
    fn default() -> Self {
        let lo = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let peers = PeerLimits::default();
        let faces = FaceLimits::default();
        Self {
            data: PathBuf::from(DEFAULT_DATA_DIR),
            p2p_listen: vec![default_p2p()],
            agh_listen: lo(4410),
            http_listen: lo(4411),
            rpc_listen: lo(3100),
            agtp_listen: lo(4480),
            agtp: AgtpConfig::default(),
            bootstrap: Vec::new(),
            peers_low: peers.low,
            peers_high: peers.high,
            greet_interval: Duration::from_secs(agora_agh::presence::DEFAULT_GREET_INTERVAL as u64),
            agh: AghConfig::default(),
            api_key: None,
            max_connections: faces.max_connections,
            header_timeout: faces.header_timeout,
            request_timeout: faces.request_timeout,
            ws_idle_timeout: faces.ws_idle_timeout,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            public_reads: false,
            rpc: RpcConfig::default(),
            memory: MemoryConfig::default(),
            learning: LearningConfig::default(),
            improving: ImprovingConfig::default(),
            payments: PaymentsConfig::default(),
            bridge: BridgeConfig::default(),
            directory: DirectoryConfig::default(),
            log: LogConfig::default(),
        }
    }
}

fn default_p2p() -> Multiaddr {
    "/ip4/127.0.0.1/tcp/4001"
        .parse()
        .unwrap_or_else(|_| Multiaddr::empty())
}

/// The configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("{path}: {message}")]
    Parse {
        /// File.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("{key}: {message}")]
    Invalid {
        /// Setting.
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl Config {
    /// Every listener on port 0 (`--ephemeral-ports`): the faces' addresses and every TCP or
    /// UDP port of the p2p addresses.
    pub fn ephemeral_ports(&mut self) {
        use libp2p::multiaddr::Protocol;
        for addr in [
            &mut self.agh_listen,
            &mut self.http_listen,
            &mut self.rpc_listen,
            &mut self.agtp_listen,
        ] {
            addr.set_port(0);
        }
        for addr in &mut self.p2p_listen {
            *addr = addr
                .iter()
                .map(|p| match p {
                    Protocol::Tcp(_) => Protocol::Tcp(0),
                    Protocol::Udp(_) => Protocol::Udp(0),
                    p => p,
                })
                .collect();
        }
    }

    /// Loads `file` (when given, it must exist; otherwise `./agora.toml` is used if present)
    /// and applies `layer` on top. Call [`Config::validate`] after the last layer.
    pub fn load(file: Option<&Path>, layer: ConfigPatch) -> Result<Self, ConfigError> {
        let mut cfg = Self::default();
        let path = match file {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.exists()),
        };
        if let Some(path) = path {
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            cfg.apply_file(&text, &path)?;
        }
        cfg.apply(layer)?;
        Ok(cfg)
    }

    /// Lays one layer over the configuration, then checks and normalises every setting
    /// (`Config::settle`).
    pub fn apply(&mut self, mut layer: ConfigPatch) -> Result<(), ConfigError> {
        faces::take_api_key(&mut layer)?;
        Patch::apply(self, layer);
        self.settle()
    }

    /// Checks each setting and puts it in its normal form (trimmed, lowercased, a `url` moved
    /// into `servers`): every number through [`in_range`], so each check is written once
    /// whichever layer the value comes from. Settling a settled configuration changes nothing.
    fn settle(&mut self) -> Result<(), ConfigError> {
        check(
            "greet_interval",
            self.greet_interval,
            Duration::from_secs(1)..,
            "must be at least 1 second",
        )?;
        self.settle_faces()?;
        self.agh.settle()?;
        self.rpc.settle()?;
        self.agtp.settle()?;
        self.memory.settle()?;
        self.learning.settle()?;
        self.improving.settle()?;
        self.payments.settle()?;
        self.bridge.settle()?;
        self.directory.settle()?;
        self.log.settle()
    }

    /// The connection manager's watermarks.
    pub fn peers(&self) -> PeerLimits {
        PeerLimits {
            low: self.peers_low,
            high: self.peers_high,
            ..PeerLimits::default()
        }
    }

    /// The connection limits of each HTTP and WebSocket face.
    pub fn faces(&self) -> FaceLimits {
        FaceLimits {
            max_connections: self.max_connections,
            header_timeout: self.header_timeout,
            request_timeout: self.request_timeout,
            ws_idle_timeout: self.ws_idle_timeout,
        }
    }

    /// Checks what single layers cannot: settings that depend on each other. Call it once,
    /// after the last layer.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(nats) = self.agh.nats() {
            nats.check()?;
        }
        if self.api_key.is_none() {
            for (key, addr) in [
                ("agh_listen", self.agh_listen),
                ("http_listen", self.http_listen),
                ("rpc_listen", self.rpc_listen),
            ] {
                if !addr.ip().is_loopback() {
                    return Err(invalid(
                        "api_key",
                        &format!(
                            "required when {key} ({addr}) is not a loopback address: set api_key \
                             in agora.toml or AGORA_API_KEY"
                        ),
                    ));
                }
            }
        }
        self.memory.validate()?;
        self.improving.validate()?;
        self.learning.validate()?;
        if self.peers_low == 0 {
            return Err(invalid("peers_low", "must be at least 1"));
        }
        if self.peers_high < self.peers_low {
            return Err(invalid(
                "peers_high",
                &format!(
                    "must be at least peers_low ({}), got {}",
                    self.peers_low, self.peers_high
                ),
            ));
        }
        Ok(())
    }
}

/// `value` when `range` holds it; otherwise the error `key: message`. Every bounded number of the
/// configuration is checked here, whichever layer (file, environment, flag) it comes from.
fn in_range<T: PartialOrd>(
    key: &str,
    value: T,
    range: impl RangeBounds<T>,
    message: &str,
) -> Result<T, ConfigError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(invalid(key, message))
    }
}

/// Refuses `value` unless `range` holds it: [`in_range`] for a setting already in place.
fn check<T: PartialOrd>(
    key: &str,
    value: T,
    range: impl RangeBounds<T>,
    message: &str,
) -> Result<(), ConfigError> {
    in_range(key, value, range, message).map(drop)
}

/// Trims `value` and refuses it unless it is one of `words`.
fn one_of(key: &str, value: &mut String, words: &[&str]) -> Result<(), ConfigError> {
    let v = value.trim();
    if !words.contains(&v) {
        return Err(invalid(
            key,
            &format!("{v:?} is not one of {}", words.join(", ")),
        ));
    }
    *value = v.to_owned();
    Ok(())
}

fn invalid(key: &str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message: message.to_owned(),
    }
}
