//! Node configuration: defaults, then `agora.toml`, then `AGORA_*` environment variables, then
//! command-line flags (each layer overrides the one before).
//!
//! Every listener defaults to 127.0.0.1 so that `agora node` on a fresh machine exposes nothing
//! beyond loopback. Port 0 asks the system for a free port; the node prints the port it got on a
//! `listening on <face> <addr>` line.
//!
//! This module owns [`Config`], [`Config::load`], [`Config::apply`] (one layer),
//! [`Config::validate`] (the checks across settings, once after the last layer) and
//! [`ConfigError`], and applies the top-level keys no section owns (`data`, the listen addresses,
//! `bootstrap`, `greet_interval`). One file per `agora.toml` section holds the rest of a setting:
//! the section's struct (its value and default), its layer struct (its key, as serde reads it),
//! its check (through `in_range` for numbers), and its row in [`SETTINGS`] (variable, flag,
//! help) in `env.rs`:
//!
//! | file | TOML | what |
//! |---|---|---|
//! | `faces.rs` | top level | API key, the faces' connection limits, origins and hosts |
//! | `peers.rs` | top level | the connection manager's watermarks |
//! | `rpc.rs` | `[rpc]` | the JSON-RPC face's flow limits and guard workers, and their defaults |
//! | `agh.rs` | `[agh]`, `[agh.nats]` | AGH settings and the NATS bridge |
//! | `agtp.rs` | `[agtp]`, `[[agtp.peers]]` | the Agent Name Service and its listener |
//! | `memory.rs`, `learning.rs`, `improving.rs`, `payments.rs` | `[memory]` … | the primitives' services |
//! | `endpoint.rs` | `base_url`, `model`, `api_key` | the OpenAI-compatible endpoint of a section |
//! | `log.rs` | `[log]` | log filter and format |
//! | `file.rs` | all | [`Overrides`], one layer in the shape of `agora.toml`, read by serde |
//! | `env.rs` | | [`SETTINGS`]: each setting's `AGORA_*` variable, flag, default and help |

mod agh;
mod agtp;
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

pub use agh::{
    AghConfig, AghOverrides, DEFAULT_MAX_CHANNELS, NatsConfig, NatsOverrides, Secret,
    nats_server_addr,
};
pub use agtp::{AgtpConfig, AgtpOverrides, PeerConfig, Weights};
pub use endpoint::Endpoint;
pub use env::{Kind, SETTINGS, Setting};
pub use faces::FaceLimits;
pub(crate) use faces::split_port;
pub use file::{Overrides, toml_keys};
pub use improving::{ImprovingConfig, ImprovingOverrides};
pub use learning::{LearningConfig, LearningOverrides};
pub use log::{LogConfig, LogFormat, LogOverrides};
pub use memory::{MEMORY_EMBEDDERS, MemoryConfig, MemoryOverrides};
pub use payments::{PaymentsConfig, PaymentsOverrides};
pub use peers::PeerLimits;
pub use rpc::RpcOverrides;

/// Default data directory.
pub const DEFAULT_DATA_DIR: &str = "agora-data";
/// Default configuration file, looked up in the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "agora.toml";

/// The node's effective configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Data directory (node key, database).
    pub data: PathBuf,
    /// libp2p listen addresses.
    pub p2p_listen: Vec<Multiaddr>,
    /// AGH WebSocket face (`ws://<addr>/agh/v0`).
    pub agh_listen: SocketAddr,
    /// HTTP API face.
    pub http_listen: SocketAddr,
    /// Hyperspace JSON-RPC face (`ws://<addr>`).
    pub rpc_listen: SocketAddr,
    /// AGTP face (the Agent Name Service).
    pub agtp_listen: SocketAddr,
    /// `[agtp]` settings.
    pub agtp: AgtpConfig,
    /// Nodes to join.
    pub bootstrap: Vec<Multiaddr>,
    /// Connection manager watermarks: above `peers.high` connected peers the least recently
    /// used unprotected ones are closed until `peers.low` remain (`peers_low`, `peers_high`).
    pub peers: PeerLimits,
    /// AGH greet interval; remote presence lives twice as long.
    pub greet_interval: Duration,
    /// AGH settings.
    pub agh: AghConfig,
    /// The node's API key (`api_key`, `AGORA_API_KEY`; `[rpc] api_key` and `AGORA_RPC_API_KEY`
    /// are older names of the same setting): required by every HTTP and WebSocket face once
    /// set, and required to bind any of them beyond loopback.
    pub api_key: Option<String>,
    /// Connection limits of each HTTP and WebSocket face (`max_connections`, `header_timeout`,
    /// `request_timeout`, `ws_idle_timeout`).
    pub faces: FaceLimits,
    /// Browser origins allowed to open WebSockets and send changes, besides the node's own
    /// pages (`allowed_origins`; lowercase `scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// Host names that name this node besides loopback ones (`allowed_hosts`; lowercase
    /// `name` or `name:port`).
    pub allowed_hosts: Vec<String>,
    /// The HTTP API's read-only endpoints answer without the API key (`public_reads`).
    pub public_reads: bool,
    /// JSON-RPC requests per second per connection (`[rpc] conn_rate`, `AGORA_RPC_CONN_RATE`).
    pub rpc_conn_rate: f64,
    /// JSON-RPC requests per second per credential (`[rpc] key_rate`, `AGORA_RPC_KEY_RATE`).
    pub rpc_key_rate: f64,
    /// JSON-RPC frames in flight per connection (`[rpc] conn_frames`, `AGORA_RPC_CONN_FRAMES`).
    pub rpc_conn_frames: usize,
    /// JSON-RPC bytes held per connection (`[rpc] conn_bytes`, `AGORA_RPC_CONN_BYTES`).
    pub rpc_conn_bytes: usize,
    /// JSON-RPC bytes held for all connections (`[rpc] total_bytes`, `AGORA_RPC_TOTAL_BYTES`).
    pub rpc_total_bytes: usize,
    /// Longest write to a JSON-RPC client (`[rpc] write_timeout_secs`,
    /// `AGORA_RPC_WRITE_TIMEOUT_SECS`).
    pub rpc_write_timeout: Duration,
    /// `guard.validate` / `guard.checkSafety` running at once (`[rpc] guard_workers`,
    /// `AGORA_RPC_GUARD_WORKERS`).
    pub rpc_guard_workers: usize,
    /// Time budget of one such call, waiting included (`[rpc] guard_budget_ms`,
    /// `AGORA_RPC_GUARD_BUDGET_MS`).
    pub rpc_guard_budget: Duration,
    /// `[memory]` settings.
    pub memory: MemoryConfig,
    /// `[learning]` settings.
    pub learning: LearningConfig,
    /// `[improving]` settings.
    pub improving: ImprovingConfig,
    /// `[payments]` settings.
    pub payments: PaymentsConfig,
    /// `[log]` settings.
    pub log: LogConfig,
}

impl Default for Config {
    fn default() -> Self {
        let lo = |port| SocketAddr::from(([127, 0, 0, 1], port));
        Self {
            data: PathBuf::from(DEFAULT_DATA_DIR),
            p2p_listen: vec![default_p2p()],
            agh_listen: lo(4410),
            http_listen: lo(4411),
            rpc_listen: lo(3100),
            agtp_listen: lo(4480),
            agtp: AgtpConfig::default(),
            bootstrap: Vec::new(),
            peers: PeerLimits::default(),
            greet_interval: Duration::from_secs(agora_agh::presence::DEFAULT_GREET_INTERVAL as u64),
            agh: AghConfig {
                replay_age: agora_agh::validate::DEFAULT_REPLAY_AGE,
                reference_admission: false,
                nats: None,
                max_channels: DEFAULT_MAX_CHANNELS,
            },
            api_key: None,
            faces: FaceLimits::default(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            public_reads: false,
            rpc_conn_rate: rpc::CONN_RATE,
            rpc_key_rate: rpc::KEY_RATE,
            rpc_conn_frames: rpc::CONN_FRAMES,
            rpc_conn_bytes: rpc::CONN_BYTES,
            rpc_total_bytes: rpc::TOTAL_BYTES,
            rpc_write_timeout: rpc::WRITE_TIMEOUT,
            rpc_guard_workers: rpc::GUARD_WORKERS,
            rpc_guard_budget: rpc::GUARD_BUDGET,
            memory: MemoryConfig::default(),
            learning: LearningConfig::default(),
            improving: ImprovingConfig::default(),
            payments: PaymentsConfig::default(),
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
    /// Loads `file` (when given, it must exist; otherwise `./agora.toml` is used if present)
    /// and applies `overrides` on top. Call [`Config::validate`] after the last layer.
    pub fn load(file: Option<&Path>, overrides: Overrides) -> Result<Self, ConfigError> {
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
        cfg.apply(overrides)?;
        Ok(cfg)
    }

    /// Applies one layer of overrides.
    pub fn apply(&mut self, mut o: Overrides) -> Result<(), ConfigError> {
        self.apply_access(&o)?;
        self.apply_memory(&o)?;
        self.apply_learning(&o)?;
        self.apply_improving(&o)?;
        self.payments.apply(&o)?;
        self.log.apply(&o)?;
        if let Some(d) = o.data.take() {
            self.data = d;
        }
        if !o.p2p_listen.is_empty() {
            self.p2p_listen = parse_multiaddrs(&o.p2p_listen, "p2p_listen")?;
        }
        for (value, slot, key) in [
            (o.agh_listen.take(), &mut self.agh_listen, "agh_listen"),
            (o.http_listen.take(), &mut self.http_listen, "http_listen"),
            (o.rpc_listen.take(), &mut self.rpc_listen, "rpc_listen"),
            (o.agtp_listen.take(), &mut self.agtp_listen, "agtp_listen"),
        ] {
            if let Some(v) = value {
                *slot = v
                    .trim()
                    .parse()
                    .map_err(|_| invalid(key, &format!("{v:?} is not an IP:port address")))?;
            }
        }
        if !o.bootstrap.is_empty() {
            self.bootstrap = parse_multiaddrs(&o.bootstrap, "bootstrap")?;
        }
        if let Some(low) = o.peers_low {
            self.peers.low = low;
        }
        if let Some(high) = o.peers_high {
            self.peers.high = high;
        }
        if let Some(secs) = o.greet_interval {
            self.greet_interval = Duration::from_secs(in_range(
                "greet_interval",
                secs,
                1..,
                "must be at least 1 second",
            )?);
        }
        self.apply_rpc(&o)?;
        if !o.nats.is_empty() {
            o.nats
                .apply_to(self.agh.nats.get_or_insert_with(NatsConfig::default));
        }
        if let Some(t) = o.agtp.tls {
            self.agtp.tls = t;
        }
        if let Some(i) = o.agtp.insecure {
            self.agtp.insecure = i;
        }
        let base = o.base.take().unwrap_or_default();
        self.apply_agtp(o.agtp, &base)?;
        self.apply_agh(o.agh, &base)
    }

    /// Checks what single layers cannot: settings that depend on each other. Call it once,
    /// after the last layer.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(nats) = &self.agh.nats {
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
        if self.improving.endpoint.base_url.is_some() || self.improving.endpoint.model.is_some() {
            self.improving
                .endpoint
                .validate("improving", "base_url or model")?;
        }
        if self.learning.reflector == "openai" {
            self.learning
                .endpoint
                .validate("learning", "reflector = \"openai\"")?;
        }
        if self.peers.low == 0 {
            return Err(invalid("peers_low", "must be at least 1"));
        }
        if self.peers.high < self.peers.low {
            return Err(invalid(
                "peers_high",
                &format!(
                    "must be at least peers_low ({}), got {}",
                    self.peers.low, self.peers.high
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

/// Stores a layer's `value` in `slot` once [`in_range`] accepts it; `None` leaves `slot`.
fn set_in_range<T: PartialOrd, U: From<T>>(
    slot: &mut U,
    key: &str,
    value: Option<T>,
    range: impl RangeBounds<T>,
    message: &str,
) -> Result<(), ConfigError> {
    if let Some(v) = value {
        *slot = in_range(key, v, range, message)?.into();
    }
    Ok(())
}

fn invalid(key: &str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message: message.to_owned(),
    }
}

fn parse_multiaddrs(values: &[String], key: &str) -> Result<Vec<Multiaddr>, ConfigError> {
    values
        .iter()
        .map(|v| {
            v.trim()
                .parse::<Multiaddr>()
                .map_err(|e| invalid(key, &format!("{v:?} is not a multiaddr ({e})")))
        })
        .collect()
}
