//! [`Overrides`], one layer of settings, and the `AGORA_*` environment variables that fill it.

use std::path::PathBuf;

use super::{Config, ConfigError, NatsOverrides, Secret, invalid};

/// Overrides from the environment or the command line; `None` leaves the layer below.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--data` / `AGORA_DATA`.
    pub data: Option<PathBuf>,
    /// `--p2p-listen` / `AGORA_P2P_LISTEN` (comma-separated in the environment).
    pub p2p_listen: Vec<String>,
    /// `--agh-listen` / `AGORA_AGH_LISTEN`.
    pub agh_listen: Option<String>,
    /// `--http-listen` / `AGORA_HTTP_LISTEN`.
    pub http_listen: Option<String>,
    /// `--rpc-listen` / `AGORA_RPC_LISTEN`.
    pub rpc_listen: Option<String>,
    /// `--agtp-listen` / `AGORA_AGTP_LISTEN`.
    pub agtp_listen: Option<String>,
    /// `--bootstrap` / `AGORA_BOOTSTRAP` (repeatable; comma-separated in the environment).
    pub bootstrap: Vec<String>,
    /// `--peers-low` / `AGORA_PEERS_LOW`.
    pub peers_low: Option<usize>,
    /// `--peers-high` / `AGORA_PEERS_HIGH`.
    pub peers_high: Option<usize>,
    /// `--greet-interval` / `AGORA_GREET_INTERVAL`, seconds.
    pub greet_interval: Option<u64>,
    /// `AGORA_AGH_NATS_*` (see [`NatsOverrides`]).
    pub nats: NatsOverrides,
    /// `AGORA_API_KEY`.
    pub api_key: Option<String>,
    /// `AGORA_RPC_API_KEY` (an older name of `AGORA_API_KEY`).
    pub rpc_api_key: Option<String>,
    /// `--max-connections` / `AGORA_MAX_CONNECTIONS`.
    pub max_connections: Option<usize>,
    /// `--header-timeout` / `AGORA_HEADER_TIMEOUT`, seconds.
    pub header_timeout: Option<u64>,
    /// `--request-timeout` / `AGORA_REQUEST_TIMEOUT`, seconds.
    pub request_timeout: Option<u64>,
    /// `--ws-idle-timeout` / `AGORA_WS_IDLE_TIMEOUT`, seconds.
    pub ws_idle_timeout: Option<u64>,
    /// `--allow-origin` / `AGORA_ALLOWED_ORIGINS` (repeatable; comma-separated in the environment).
    pub allowed_origins: Vec<String>,
    /// `--allow-host` / `AGORA_ALLOWED_HOSTS` (repeatable; comma-separated in the environment).
    pub allowed_hosts: Vec<String>,
    /// `--public-reads` / `AGORA_PUBLIC_READS`.
    pub public_reads: Option<bool>,
    /// `--agh-max-channels` / `AGORA_AGH_MAX_CHANNELS`.
    pub agh_max_channels: Option<usize>,
    /// `AGORA_RPC_CONN_RATE`.
    pub rpc_conn_rate: Option<f64>,
    /// `AGORA_RPC_KEY_RATE`.
    pub rpc_key_rate: Option<f64>,
    /// `AGORA_RPC_CONN_FRAMES`.
    pub rpc_conn_frames: Option<usize>,
    /// `AGORA_RPC_CONN_BYTES`.
    pub rpc_conn_bytes: Option<usize>,
    /// `AGORA_RPC_TOTAL_BYTES`.
    pub rpc_total_bytes: Option<usize>,
    /// `AGORA_RPC_WRITE_TIMEOUT_SECS`.
    pub rpc_write_timeout: Option<u64>,
    /// `AGORA_RPC_GUARD_WORKERS`.
    pub rpc_guard_workers: Option<usize>,
    /// `AGORA_RPC_GUARD_BUDGET_MS`.
    pub rpc_guard_budget_ms: Option<u64>,
    /// `--agtp-tls` / `AGORA_AGTP_TLS`: TLS even on loopback.
    pub agtp_tls: Option<bool>,
    /// `--insecure` / `AGORA_AGTP_INSECURE`: plain AGTP beyond loopback.
    pub agtp_insecure: Option<bool>,
    /// `AGORA_MEMORY_SERVE`.
    pub memory_serve: Option<bool>,
    /// `AGORA_MEMORY_EMBEDDER`.
    pub memory_embedder: Option<String>,
    /// `AGORA_MEMORY_BASE_URL`.
    pub memory_base_url: Option<String>,
    /// `AGORA_MEMORY_MODEL`.
    pub memory_model: Option<String>,
    /// `AGORA_MEMORY_API_KEY`.
    pub memory_api_key: Option<String>,
    /// `AGORA_MEMORY_WORKERS`.
    pub memory_workers: Option<usize>,
    /// `AGORA_MEMORY_MAX_MEMORIES`.
    pub memory_max_memories: Option<usize>,
    /// `AGORA_MEMORY_PEER_RATE`.
    pub memory_peer_rate: Option<f64>,
    /// `AGORA_LEARNING_REFLECTOR`.
    pub learning_reflector: Option<String>,
    /// `AGORA_LEARNING_BASE_URL`.
    pub learning_base_url: Option<String>,
    /// `AGORA_LEARNING_MODEL`.
    pub learning_model: Option<String>,
    /// `AGORA_LEARNING_API_KEY`.
    pub learning_api_key: Option<String>,
    /// `AGORA_LEARNING_TIMEOUT_MS`.
    pub learning_timeout_ms: Option<u64>,
    /// `AGORA_LEARNING_MAX_PLAYBOOKS`.
    pub learning_max_playbooks: Option<usize>,
    /// `AGORA_LEARNING_MAX_BULLETS`.
    pub learning_max_bullets: Option<usize>,
    /// `AGORA_IMPROVING_SHARE`.
    pub improving_share: Option<bool>,
    /// `AGORA_IMPROVING_TASK_TYPES` (comma-separated; empty leaves the layer below).
    pub improving_task_types: Vec<String>,
    /// `AGORA_IMPROVING_MAX_LIBRARY`.
    pub improving_max_library: Option<usize>,
    /// `AGORA_IMPROVING_MAX_TASK_TYPES`.
    pub improving_max_task_types: Option<usize>,
    /// `AGORA_IMPROVING_MIN_REWARD`.
    pub improving_min_reward: Option<f64>,
    /// `AGORA_IMPROVING_BASE_URL`.
    pub improving_base_url: Option<String>,
    /// `AGORA_IMPROVING_MODEL`.
    pub improving_model: Option<String>,
    /// `AGORA_IMPROVING_API_KEY`.
    pub improving_api_key: Option<String>,
    /// `AGORA_IMPROVING_TIMEOUT_MS`.
    pub improving_timeout_ms: Option<u64>,
    /// `AGORA_PAYMENTS_WALLET_KEY_FILE`.
    pub payments_wallet_key_file: Option<PathBuf>,
    /// `AGORA_PAYMENTS_CHALLENGE_TTL_SECS`.
    pub payments_challenge_ttl_secs: Option<u64>,
    /// `[log] level`.
    pub log_level: Option<String>,
    /// `AGORA_LOG_FORMAT`, `--log-format`.
    pub log_format: Option<String>,
}

impl Config {
    /// Overrides read from `AGORA_*` environment variables; a value that does not parse is an
    /// error naming the variable. An empty number is the same as an unset one.
    pub fn env_overrides(get: impl Fn(&str) -> Option<String>) -> Result<Overrides, ConfigError> {
        let list = |key: &str| {
            get(key)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(Overrides {
            data: get("AGORA_DATA").map(PathBuf::from),
            p2p_listen: list("AGORA_P2P_LISTEN"),
            agh_listen: get("AGORA_AGH_LISTEN"),
            http_listen: get("AGORA_HTTP_LISTEN"),
            rpc_listen: get("AGORA_RPC_LISTEN"),
            agtp_listen: get("AGORA_AGTP_LISTEN"),
            bootstrap: list("AGORA_BOOTSTRAP"),
            peers_low: number(&get, "AGORA_PEERS_LOW")?,
            peers_high: number(&get, "AGORA_PEERS_HIGH")?,
            greet_interval: number(&get, "AGORA_GREET_INTERVAL")?,
            nats: NatsOverrides {
                servers: list("AGORA_AGH_NATS_URL"),
                user: get("AGORA_AGH_NATS_USER"),
                password: get("AGORA_AGH_NATS_PASSWORD").map(Secret::Value),
                token: get("AGORA_AGH_NATS_TOKEN").map(Secret::Value),
                nkey_seed_file: get("AGORA_AGH_NATS_NKEY_SEED_FILE").map(PathBuf::from),
                creds_file: get("AGORA_AGH_NATS_CREDS_FILE").map(PathBuf::from),
                tls_required: boolean(&get, "AGORA_AGH_NATS_TLS_REQUIRED")?,
                ca_file: get("AGORA_AGH_NATS_CA_FILE").map(PathBuf::from),
                cert_file: get("AGORA_AGH_NATS_CERT_FILE").map(PathBuf::from),
                key_file: get("AGORA_AGH_NATS_KEY_FILE").map(PathBuf::from),
            },
            api_key: get("AGORA_API_KEY"),
            rpc_api_key: get("AGORA_RPC_API_KEY"),
            max_connections: number(&get, "AGORA_MAX_CONNECTIONS")?,
            header_timeout: number(&get, "AGORA_HEADER_TIMEOUT")?,
            request_timeout: number(&get, "AGORA_REQUEST_TIMEOUT")?,
            ws_idle_timeout: number(&get, "AGORA_WS_IDLE_TIMEOUT")?,
            allowed_origins: list("AGORA_ALLOWED_ORIGINS"),
            allowed_hosts: list("AGORA_ALLOWED_HOSTS"),
            public_reads: boolean(&get, "AGORA_PUBLIC_READS")?,
            agh_max_channels: number(&get, "AGORA_AGH_MAX_CHANNELS")?,
            rpc_conn_rate: number(&get, "AGORA_RPC_CONN_RATE")?,
            rpc_key_rate: number(&get, "AGORA_RPC_KEY_RATE")?,
            rpc_conn_frames: number(&get, "AGORA_RPC_CONN_FRAMES")?,
            rpc_conn_bytes: number(&get, "AGORA_RPC_CONN_BYTES")?,
            rpc_total_bytes: number(&get, "AGORA_RPC_TOTAL_BYTES")?,
            rpc_write_timeout: number(&get, "AGORA_RPC_WRITE_TIMEOUT_SECS")?,
            rpc_guard_workers: number(&get, "AGORA_RPC_GUARD_WORKERS")?,
            rpc_guard_budget_ms: number(&get, "AGORA_RPC_GUARD_BUDGET_MS")?,
            agtp_tls: boolean(&get, "AGORA_AGTP_TLS")?,
            agtp_insecure: boolean(&get, "AGORA_AGTP_INSECURE")?,
            memory_serve: boolean(&get, "AGORA_MEMORY_SERVE")?,
            memory_embedder: get("AGORA_MEMORY_EMBEDDER"),
            memory_base_url: get("AGORA_MEMORY_BASE_URL"),
            memory_model: get("AGORA_MEMORY_MODEL"),
            memory_api_key: get("AGORA_MEMORY_API_KEY"),
            memory_workers: number(&get, "AGORA_MEMORY_WORKERS")?,
            memory_max_memories: number(&get, "AGORA_MEMORY_MAX_MEMORIES")?,
            memory_peer_rate: number(&get, "AGORA_MEMORY_PEER_RATE")?,
            learning_reflector: get("AGORA_LEARNING_REFLECTOR"),
            learning_base_url: get("AGORA_LEARNING_BASE_URL"),
            learning_model: get("AGORA_LEARNING_MODEL"),
            learning_api_key: get("AGORA_LEARNING_API_KEY"),
            learning_timeout_ms: number(&get, "AGORA_LEARNING_TIMEOUT_MS")?,
            learning_max_playbooks: number(&get, "AGORA_LEARNING_MAX_PLAYBOOKS")?,
            learning_max_bullets: number(&get, "AGORA_LEARNING_MAX_BULLETS")?,
            improving_share: boolean(&get, "AGORA_IMPROVING_SHARE")?,
            improving_task_types: list("AGORA_IMPROVING_TASK_TYPES"),
            improving_max_library: number(&get, "AGORA_IMPROVING_MAX_LIBRARY")?,
            improving_max_task_types: number(&get, "AGORA_IMPROVING_MAX_TASK_TYPES")?,
            improving_min_reward: number(&get, "AGORA_IMPROVING_MIN_REWARD")?,
            improving_base_url: get("AGORA_IMPROVING_BASE_URL"),
            improving_model: get("AGORA_IMPROVING_MODEL"),
            improving_api_key: get("AGORA_IMPROVING_API_KEY"),
            improving_timeout_ms: number(&get, "AGORA_IMPROVING_TIMEOUT_MS")?,
            payments_wallet_key_file: get("AGORA_PAYMENTS_WALLET_KEY_FILE").map(PathBuf::from),
            payments_challenge_ttl_secs: number(&get, "AGORA_PAYMENTS_CHALLENGE_TTL_SECS")?,
            log_level: None,
            log_format: get("AGORA_LOG_FORMAT"),
        })
    }
}

/// A numeric environment variable; empty is unset.
fn number<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    key: &str,
) -> Result<Option<T>, ConfigError> {
    get(key)
        .filter(|v| !v.trim().is_empty())
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| invalid(key, &format!("{v:?} is not a number")))
        })
        .transpose()
}

/// An on/off environment variable: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off`, empty.
fn boolean(get: &impl Fn(&str) -> Option<String>, key: &str) -> Result<Option<bool>, ConfigError> {
    get(key)
        .map(|v| match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" | "" => Ok(false),
            _ => Err(invalid(
                key,
                &format!("{v:?} is not one of 1, true, yes, on, 0, false, no, off"),
            )),
        })
        .transpose()
}
