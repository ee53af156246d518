//! Node configuration: defaults, then `agora.toml`, then `AGORA_*` environment variables, then
//! command-line flags (each layer overrides the one before).
//!
//! Every listener defaults to 127.0.0.1 so that `agora node` on a fresh machine exposes nothing
//! beyond loopback. Port 0 asks the system for a free port; the node prints the port it got on a
//! `listening on <face> <addr>` line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libp2p::Multiaddr;
use serde::Deserialize;

use crate::faces::serve;
use crate::mesh::connmgr::Limits;

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
    pub peers: Limits,
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
    pub faces: serve::Limits,
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

/// `[memory]` settings (`docs/node.md` "Memory").
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryConfig {
    /// Hold memories and join the ring (`serve`, `AGORA_MEMORY_SERVE`; default true).
    pub serve: bool,
    /// `auto` (MiniLM when installed, else lexical), `minilm`, `lexical` or `openai`
    /// (`embedder`, `AGORA_MEMORY_EMBEDDER`).
    pub embedder: String,
    /// The `openai` embedder's endpoint (`base_url`, `model`, `api_key`;
    /// `AGORA_MEMORY_BASE_URL`, `AGORA_MEMORY_MODEL`, `AGORA_MEMORY_API_KEY`).
    pub endpoint: Endpoint,
    /// Worker threads for embeddings and searches (`workers`, `AGORA_MEMORY_WORKERS`; default 2).
    pub workers: usize,
    /// Most memories this node holds (`max_memories`, `AGORA_MEMORY_MAX_MEMORIES`; default
    /// 200,000).
    pub max_memories: usize,
    /// Node-to-node memory requests per second accepted from one peer (`peer_rate`,
    /// `AGORA_MEMORY_PEER_RATE`; default 2,000).
    pub peer_rate: f64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            serve: true,
            embedder: "auto".to_owned(),
            endpoint: Endpoint::default(),
            workers: 2,
            max_memories: 200_000,
            peer_rate: 2_000.0,
        }
    }
}

/// An OpenAI-compatible endpoint: `base_url`, `model`, `api_key` of a section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// The API root, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: Option<String>,
    /// The model asked for.
    pub model: Option<String>,
    /// Bearer token.
    pub api_key: Option<String>,
}

impl Endpoint {
    /// Applies one layer's values of section `section`, each checked.
    fn apply(
        &mut self,
        section: &str,
        base_url: Option<&String>,
        model: Option<&String>,
        api_key: Option<&String>,
    ) -> Result<(), ConfigError> {
        if let Some(u) = base_url {
            let u = u.trim();
            if !(u.starts_with("http://") || u.starts_with("https://")) || u.len() < 10 {
                return Err(invalid(
                    &format!("{section}.base_url"),
                    &format!("{u:?} is not an http:// or https:// URL"),
                ));
            }
            self.base_url = Some(u.to_owned());
        }
        if let Some(model) = model {
            let model = model.trim();
            if model.is_empty() || model.len() > 120 || model.chars().any(char::is_control) {
                return Err(invalid(
                    &format!("{section}.model"),
                    "must be 1..120 printable characters",
                ));
            }
            self.model = Some(model.to_owned());
        }
        if let Some(k) = api_key {
            self.api_key = Some(k.trim().to_owned()).filter(|k| !k.is_empty());
        }
        Ok(())
    }

    /// The checks when the endpoint is used (`user` names the setting that uses it): `base_url`
    /// and `model` are required, and a key is never sent in the clear beyond loopback.
    fn validate(&self, section: &str, user: &str) -> Result<(), ConfigError> {
        let Some(url) = &self.base_url else {
            return Err(invalid(
                &format!("{section}.base_url"),
                &format!("required by {user} (e.g. http://127.0.0.1:11434/v1)"),
            ));
        };
        if self.model.is_none() {
            return Err(invalid(
                &format!("{section}.model"),
                &format!("required by {user}"),
            ));
        }
        if self.api_key.is_some() && url.starts_with("http://") && !is_loopback_url(url) {
            return Err(invalid(
                &format!("{section}.base_url"),
                &format!(
                    "must be https:// when {section}.api_key is set and the host is not loopback"
                ),
            ));
        }
        Ok(())
    }
}

impl MemoryConfig {
    /// The checks across settings: `openai` needs its endpoint.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.embedder == "openai" {
            self.endpoint.validate("memory", "embedder = \"openai\"")?;
        }
        Ok(())
    }
}

/// `[learning]` settings (`docs/node.md` "Learning").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LearningConfig {
    /// `builtin` or `openai` (`reflector`, `AGORA_LEARNING_REFLECTOR`).
    pub reflector: String,
    /// The `openai` reflector's chat endpoint (`base_url`, `model`, `api_key`;
    /// `AGORA_LEARNING_BASE_URL`, `AGORA_LEARNING_MODEL`, `AGORA_LEARNING_API_KEY`).
    pub endpoint: Endpoint,
    /// Deadline of one LLM reflection (`timeout_ms`, `AGORA_LEARNING_TIMEOUT_MS`; default
    /// 20,000).
    pub timeout_ms: u64,
    /// Most playbooks (`max_playbooks`, `AGORA_LEARNING_MAX_PLAYBOOKS`; default 1,000).
    pub max_playbooks: usize,
    /// Most bullets per playbook (`max_bullets`, `AGORA_LEARNING_MAX_BULLETS`; default 5,000).
    pub max_bullets: usize,
}

impl Default for LearningConfig {
    fn default() -> Self {
        Self {
            reflector: "builtin".to_owned(),
            endpoint: Endpoint::default(),
            timeout_ms: 20_000,
            max_playbooks: 1_000,
            max_bullets: 5_000,
        }
    }
}

/// `[improving]` settings (`docs/node.md` "Self-improving").
#[derive(Clone, Debug, PartialEq)]
pub struct ImprovingConfig {
    /// Share recorded trajectories on gossip unless a call says otherwise (`share`,
    /// `AGORA_IMPROVING_SHARE`; default false: sharing is opt-in, spec §9.3).
    pub share: bool,
    /// Task types to learn from: their trajectory topics are joined at start (`task_types`,
    /// `AGORA_IMPROVING_TASK_TYPES`, comma-separated).
    pub task_types: Vec<String>,
    /// Most trajectories per task type (`max_library`, `AGORA_IMPROVING_MAX_LIBRARY`; default
    /// 1,000).
    pub max_library: usize,
    /// Most task types (`max_task_types`, `AGORA_IMPROVING_MAX_TASK_TYPES`; default 256).
    pub max_task_types: usize,
    /// Least reward of a trajectory received from another node (`min_reward`,
    /// `AGORA_IMPROVING_MIN_REWARD`; default 0).
    pub min_reward: f64,
    /// The chat endpoint of `augment` FULL_PIPELINE (`base_url`, `model`, `api_key`;
    /// `AGORA_IMPROVING_BASE_URL`, `AGORA_IMPROVING_MODEL`, `AGORA_IMPROVING_API_KEY`).
    pub endpoint: Endpoint,
    /// Deadline of one model call (`timeout_ms`, `AGORA_IMPROVING_TIMEOUT_MS`; default 20,000).
    pub timeout_ms: u64,
}

impl Default for ImprovingConfig {
    fn default() -> Self {
        Self {
            share: false,
            task_types: Vec::new(),
            max_library: 1_000,
            max_task_types: 256,
            min_reward: 0.0,
            endpoint: Endpoint::default(),
            timeout_ms: 20_000,
        }
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event (ANSI colours only when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields`).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("{other:?} is not a log format (text or json)")),
        }
    }
}

/// `[log]` settings (`docs/node.md` "Logging").
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LogConfig {
    /// A `tracing` filter (`level`, e.g. `info` or `warn,agora_node=debug`); `RUST_LOG` and
    /// `AGORA_LOG` take precedence. Default `warn,libp2p_kad=error,async_nats=off,agora_node=info`.
    pub level: Option<String>,
    /// `format` (`AGORA_LOG_FORMAT`, `--log-format`): `text` (default) or `json`.
    pub format: LogFormat,
}

/// `[payments]` settings (`docs/node.md` "Micropayments").
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PaymentsConfig {
    /// The wallet's secp256k1 key file (`wallet_key_file`, `AGORA_PAYMENTS_WALLET_KEY_FILE`;
    /// default `<data>/wallet.key`, created at first start; a relative path is taken from the
    /// data directory).
    pub wallet_key_file: Option<PathBuf>,
    /// How long a payment challenge stays payable, seconds (`challenge_ttl_secs`,
    /// `AGORA_PAYMENTS_CHALLENGE_TTL_SECS`; 10..86,400, default 300).
    pub challenge_ttl_secs: Option<u64>,
}

/// Does an `http://` URL name a loopback host (`127.0.0.0/8`, `[::1]` or `localhost`)?
fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The embedders `[memory] embedder` accepts.
pub const MEMORY_EMBEDDERS: [&str; 4] = ["auto", "minilm", "lexical", "openai"];

/// `[agh]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AghConfig {
    /// Replay age in seconds.
    pub replay_age: i64,
    /// Apply the AGH runtime's own admission rules.
    pub reference_admission: bool,
    /// Optional NATS bridge.
    pub nats: Option<NatsConfig>,
    /// Channels one agent connection may be in (`[agh] max_channels`).
    pub max_channels: usize,
}

/// Default of `[agh] max_channels`.
pub const DEFAULT_MAX_CHANNELS: usize = 64;

/// `[agtp]` settings: the Agent Name Service and its listener.
#[derive(Clone, Debug, PartialEq)]
pub struct AgtpConfig {
    /// The name server's name in `federation_path` and its own manifest (default: its key id).
    pub name: Option<String>,
    /// Serve TLS even on loopback (`tls = true`, `--agtp-tls`).
    pub tls: bool,
    /// Serve plain AGTP beyond loopback (`insecure = true`, `--insecure`).
    pub insecure: bool,
    /// Certificate chain (PEM); generated into the data directory when absent.
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of `cert`.
    pub key: Option<PathBuf>,
    /// Extra names (DNS names or IP literals) for the generated certificate.
    pub tls_names: Vec<String>,
    /// Status code for a missing `discovery:query` scope: 451 (default), 455 or 262.
    pub scope_violation_code: u16,
    /// `rank_score` weights: normalised trust tier, behavioural trust, capability match.
    pub weights: [f64; 3],
    /// DISCOVER requests per second per Agent-ID.
    pub rate: f64,
    /// Burst of DISCOVER requests per Agent-ID.
    pub burst: f64,
    /// Re-DESCRIBE interval of indexed agents.
    pub refresh_interval: Duration,
    /// Delay before retrying a failed re-DESCRIBE.
    pub refresh_retry: Duration,
    /// Deadline of a whole DESCRIBE during refresh.
    pub refresh_timeout: Duration,
    /// Public JWK files of the governance keys allowed to (de)register agents.
    pub governance_keys: Vec<PathBuf>,
    /// Federation peers.
    pub peers: Vec<PeerConfig>,
    /// How long a DISCOVER waits for federation peers.
    pub federation_deadline: Duration,
    /// What an Authority-Scope claimed by a caller the name server has no registered document
    /// for means: taken as asserted (default) or refused with 262 `scope-claim-invalid`.
    pub unregistered_scope_claims: agora_agtp::scope::UnregisteredClaims,
    /// `DISCOVER /population` without an Authority-Scope is answered (default), as the
    /// reference coordinator does; `false` applies the draft's `discovery:query` rule there too.
    pub population_open: bool,
}

impl Default for AgtpConfig {
    fn default() -> Self {
        Self {
            name: None,
            tls: false,
            insecure: false,
            cert: None,
            key: None,
            tls_names: Vec::new(),
            scope_violation_code: 451,
            weights: [0.3, 0.4, 0.3],
            rate: 20.0,
            burst: 40.0,
            refresh_interval: Duration::from_secs(24 * 3600),
            refresh_retry: Duration::from_secs(300),
            refresh_timeout: Duration::from_secs(10),
            governance_keys: Vec::new(),
            peers: Vec::new(),
            federation_deadline: Duration::from_millis(1500),
            unregistered_scope_claims: agora_agtp::scope::UnregisteredClaims::Asserted,
            population_open: true,
        }
    }
}

/// `[[agtp.peers]]`: a federated name server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerConfig {
    /// Its name in `federation_path`.
    pub name: String,
    /// `host:port` of its AGTP face.
    pub endpoint: String,
    /// Its pinned public key (a JWK file).
    pub key: PathBuf,
    /// Certificate (PEM) to trust for its TLS; the web PKI roots otherwise.
    pub ca: Option<PathBuf>,
    /// Force TLS (`Some(true)`) or plain (`Some(false)`); by default plain on loopback only.
    pub tls: Option<bool>,
}

/// `[agh.nats]` settings: the servers of one NATS cluster, at most one authentication method,
/// TLS. See `crate::faces::nats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsConfig {
    /// Server URLs (`url` or `servers`, `AGORA_AGH_NATS_URL` comma-separated), e.g.
    /// `nats://127.0.0.1:4222`; several for a cluster.
    pub servers: Vec<String>,
    /// `user` (`AGORA_AGH_NATS_USER`), with `password`.
    pub user: Option<String>,
    /// `password_file` or `AGORA_AGH_NATS_PASSWORD`.
    pub password: Option<Secret>,
    /// `token_file` or `AGORA_AGH_NATS_TOKEN`.
    pub token: Option<Secret>,
    /// `nkey_seed_file` (`AGORA_AGH_NATS_NKEY_SEED_FILE`): a user NKey seed (`SU…`).
    pub nkey_seed_file: Option<PathBuf>,
    /// `creds_file` (`AGORA_AGH_NATS_CREDS_FILE`): a user JWT and NKey seed.
    pub creds_file: Option<PathBuf>,
    /// `tls_required` (`AGORA_AGH_NATS_TLS_REQUIRED`): refuse a connection without TLS.
    pub tls_required: bool,
    /// `ca_file` (`AGORA_AGH_NATS_CA_FILE`): PEM roots to trust instead of the Mozilla roots.
    pub ca_file: Option<PathBuf>,
    /// `cert_file` (`AGORA_AGH_NATS_CERT_FILE`): client certificate chain (PEM), with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// `key_file` (`AGORA_AGH_NATS_KEY_FILE`): the client certificate's private key (PEM).
    pub key_file: Option<PathBuf>,
}

impl NatsConfig {
    /// Checks the servers and that the authentication and TLS settings go together.
    fn check(&self) -> Result<(), ConfigError> {
        if self.servers.is_empty() {
            return Err(invalid(
                "agh.nats",
                "no server: set url or servers (or AGORA_AGH_NATS_URL)",
            ));
        }
        for url in &self.servers {
            crate::faces::nats::server_addr(url)
                .map_err(|e| invalid("agh.nats.servers", &format!("{url:?}: {e}")))?;
        }
        if self.user.is_some() != self.password.is_some() {
            return Err(invalid(
                "agh.nats.user",
                "user and password (password_file or AGORA_AGH_NATS_PASSWORD) go together",
            ));
        }
        let methods = [
            self.token.is_some(),
            self.user.is_some(),
            self.nkey_seed_file.is_some(),
            self.creds_file.is_some(),
        ];
        if methods.into_iter().filter(|m| *m).count() > 1 {
            return Err(invalid(
                "agh.nats",
                "set at most one of token, user and password, nkey_seed_file, creds_file",
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(invalid(
                "agh.nats.cert_file",
                "cert_file and key_file go together",
            ));
        }
        Ok(())
    }
}

/// A secret: a file holding it (surrounding whitespace ignored) or a value from the
/// environment. Its `Debug` form never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// Read from this file when the node starts.
    File(PathBuf),
    /// Given by an environment variable.
    Value(String),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            Self::Value(_) => f.write_str("Value(<redacted>)"),
        }
    }
}

/// Environment overrides of `[agh.nats]`.
#[derive(Clone, Debug, Default)]
pub struct NatsOverrides {
    /// `AGORA_AGH_NATS_URL` (comma-separated).
    pub servers: Vec<String>,
    /// `AGORA_AGH_NATS_USER`.
    pub user: Option<String>,
    /// `AGORA_AGH_NATS_PASSWORD`.
    pub password: Option<Secret>,
    /// `AGORA_AGH_NATS_TOKEN`.
    pub token: Option<Secret>,
    /// `AGORA_AGH_NATS_NKEY_SEED_FILE`.
    pub nkey_seed_file: Option<PathBuf>,
    /// `AGORA_AGH_NATS_CREDS_FILE`.
    pub creds_file: Option<PathBuf>,
    /// `AGORA_AGH_NATS_TLS_REQUIRED`.
    pub tls_required: Option<bool>,
    /// `AGORA_AGH_NATS_CA_FILE`.
    pub ca_file: Option<PathBuf>,
    /// `AGORA_AGH_NATS_CERT_FILE`.
    pub cert_file: Option<PathBuf>,
    /// `AGORA_AGH_NATS_KEY_FILE`.
    pub key_file: Option<PathBuf>,
}

impl NatsOverrides {
    fn is_empty(&self) -> bool {
        self.servers.is_empty()
            && self.user.is_none()
            && self.password.is_none()
            && self.token.is_none()
            && self.nkey_seed_file.is_none()
            && self.creds_file.is_none()
            && self.tls_required.is_none()
            && self.ca_file.is_none()
            && self.cert_file.is_none()
            && self.key_file.is_none()
    }

    fn apply_to(self, n: &mut NatsConfig) {
        if !self.servers.is_empty() {
            n.servers = self.servers;
        }
        if self.user.is_some() {
            n.user = self.user;
        }
        for (value, slot) in [(self.password, &mut n.password), (self.token, &mut n.token)] {
            if value.is_some() {
                *slot = value;
            }
        }
        for (value, slot) in [
            (self.nkey_seed_file, &mut n.nkey_seed_file),
            (self.creds_file, &mut n.creds_file),
            (self.ca_file, &mut n.ca_file),
            (self.cert_file, &mut n.cert_file),
            (self.key_file, &mut n.key_file),
        ] {
            if value.is_some() {
                *slot = value;
            }
        }
        if let Some(t) = self.tls_required {
            n.tls_required = t;
        }
    }
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
            peers: Limits::default(),
            greet_interval: Duration::from_secs(agora_agh::presence::DEFAULT_GREET_INTERVAL as u64),
            agh: AghConfig {
                replay_age: agora_agh::validate::DEFAULT_REPLAY_AGE,
                reference_admission: false,
                nats: None,
                max_channels: DEFAULT_MAX_CHANNELS,
            },
            api_key: None,
            faces: serve::Limits::default(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            public_reads: false,
            rpc_conn_rate: crate::faces::rpc::CONN_RATE,
            rpc_key_rate: crate::faces::rpc::KEY_RATE,
            rpc_conn_frames: crate::faces::rpc::CONN_FRAMES,
            rpc_conn_bytes: crate::faces::rpc::CONN_BYTES,
            rpc_total_bytes: crate::faces::rpc::TOTAL_BYTES,
            rpc_write_timeout: crate::faces::rpc::WRITE_TIMEOUT,
            rpc_guard_workers: crate::hyperspace::LongCallSettings::default().workers,
            rpc_guard_budget: crate::hyperspace::LongCallSettings::default().budget,
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

/// The shape of `agora.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    data: Option<PathBuf>,
    p2p_listen: Option<OneOrMany>,
    agh_listen: Option<String>,
    http_listen: Option<String>,
    rpc_listen: Option<String>,
    agtp_listen: Option<String>,
    bootstrap: Option<OneOrMany>,
    peers_low: Option<usize>,
    peers_high: Option<usize>,
    greet_interval: Option<u64>,
    api_key: Option<String>,
    max_connections: Option<usize>,
    header_timeout: Option<u64>,
    request_timeout: Option<u64>,
    ws_idle_timeout: Option<u64>,
    allowed_origins: Option<OneOrMany>,
    allowed_hosts: Option<OneOrMany>,
    public_reads: Option<bool>,
    agh: Option<FileAgh>,
    rpc: Option<FileRpc>,
    agtp: Option<FileAgtp>,
    memory: Option<FileMemory>,
    learning: Option<FileLearning>,
    improving: Option<FileImproving>,
    payments: Option<FilePayments>,
    log: Option<FileLog>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLog {
    level: Option<String>,
    format: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePayments {
    wallet_key_file: Option<PathBuf>,
    challenge_ttl_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileImproving {
    share: Option<bool>,
    task_types: Option<OneOrMany>,
    max_library: Option<usize>,
    max_task_types: Option<usize>,
    min_reward: Option<f64>,
    base_url: Option<String>,
    model: Option<String>,
    api_key: Option<String>,
    timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLearning {
    reflector: Option<String>,
    base_url: Option<String>,
    model: Option<String>,
    api_key: Option<String>,
    timeout_ms: Option<u64>,
    max_playbooks: Option<usize>,
    max_bullets: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMemory {
    serve: Option<bool>,
    embedder: Option<String>,
    base_url: Option<String>,
    model: Option<String>,
    api_key: Option<String>,
    workers: Option<usize>,
    max_memories: Option<usize>,
    peer_rate: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAgtp {
    name: Option<String>,
    tls: Option<bool>,
    insecure: Option<bool>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    tls_names: Option<Vec<String>>,
    scope_violation_code: Option<u16>,
    weights: Option<FileWeights>,
    rate: Option<f64>,
    burst: Option<f64>,
    /// Seconds.
    refresh_interval: Option<u64>,
    /// Seconds.
    refresh_retry: Option<u64>,
    /// Milliseconds.
    refresh_timeout_ms: Option<u64>,
    governance_keys: Option<Vec<PathBuf>>,
    peers: Option<Vec<FilePeer>>,
    /// Milliseconds.
    federation_deadline_ms: Option<u64>,
    /// `asserted` or `refused`.
    unregistered_scope_claims: Option<String>,
    population_open: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWeights {
    trust_tier: f64,
    behavioral_trust: f64,
    capability_match: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePeer {
    name: String,
    endpoint: String,
    key: PathBuf,
    ca: Option<PathBuf>,
    tls: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRpc {
    api_key: Option<String>,
    conn_rate: Option<f64>,
    key_rate: Option<f64>,
    conn_frames: Option<usize>,
    conn_bytes: Option<usize>,
    total_bytes: Option<usize>,
    write_timeout_secs: Option<u64>,
    guard_workers: Option<usize>,
    guard_budget_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAgh {
    replay_age: Option<i64>,
    reference_admission: Option<bool>,
    max_channels: Option<usize>,
    nats: Option<FileNats>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNats {
    url: Option<String>,
    servers: Option<Vec<String>>,
    user: Option<String>,
    password_file: Option<PathBuf>,
    token_file: Option<PathBuf>,
    nkey_seed_file: Option<PathBuf>,
    creds_file: Option<PathBuf>,
    tls_required: Option<bool>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

impl FileNats {
    /// The section as a whole; relative paths are taken from `base` (the file's directory).
    fn into_config(self, base: &Path) -> Result<NatsConfig, ConfigError> {
        let rel = |p: Option<PathBuf>| p.map(|p| if p.is_absolute() { p } else { base.join(p) });
        let servers = match (self.url, self.servers) {
            (Some(_), Some(_)) => {
                return Err(invalid("agh.nats.url", "set url or servers, not both"));
            }
            (Some(url), None) => vec![url],
            (None, Some(servers)) => servers,
            (None, None) => Vec::new(),
        };
        Ok(NatsConfig {
            servers,
            user: self.user,
            password: rel(self.password_file).map(Secret::File),
            token: rel(self.token_file).map(Secret::File),
            nkey_seed_file: rel(self.nkey_seed_file),
            creds_file: rel(self.creds_file),
            tls_required: self.tls_required.unwrap_or(false),
            ca_file: rel(self.ca_file),
            cert_file: rel(self.cert_file),
            key_file: rel(self.key_file),
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

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

    /// Applies the contents of a TOML file.
    pub fn apply_file(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let mut file: File = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        self.apply(Overrides {
            data: file.data,
            p2p_listen: file.p2p_listen.map(OneOrMany::into_vec).unwrap_or_default(),
            agh_listen: file.agh_listen,
            http_listen: file.http_listen,
            rpc_listen: file.rpc_listen,
            agtp_listen: file.agtp_listen,
            bootstrap: file.bootstrap.map(OneOrMany::into_vec).unwrap_or_default(),
            peers_low: file.peers_low,
            peers_high: file.peers_high,
            greet_interval: file.greet_interval,
            nats: NatsOverrides::default(),
            api_key: file.api_key,
            rpc_api_key: file.rpc.as_ref().and_then(|r| r.api_key.clone()),
            max_connections: file.max_connections,
            header_timeout: file.header_timeout,
            request_timeout: file.request_timeout,
            ws_idle_timeout: file.ws_idle_timeout,
            allowed_origins: file
                .allowed_origins
                .map(OneOrMany::into_vec)
                .unwrap_or_default(),
            allowed_hosts: file
                .allowed_hosts
                .map(OneOrMany::into_vec)
                .unwrap_or_default(),
            public_reads: file.public_reads,
            agh_max_channels: file.agh.as_ref().and_then(|a| a.max_channels),
            rpc_conn_rate: file.rpc.as_ref().and_then(|r| r.conn_rate),
            rpc_key_rate: file.rpc.as_ref().and_then(|r| r.key_rate),
            rpc_conn_frames: file.rpc.as_ref().and_then(|r| r.conn_frames),
            rpc_conn_bytes: file.rpc.as_ref().and_then(|r| r.conn_bytes),
            rpc_total_bytes: file.rpc.as_ref().and_then(|r| r.total_bytes),
            rpc_write_timeout: file.rpc.as_ref().and_then(|r| r.write_timeout_secs),
            rpc_guard_workers: file.rpc.as_ref().and_then(|r| r.guard_workers),
            rpc_guard_budget_ms: file.rpc.as_ref().and_then(|r| r.guard_budget_ms),
            agtp_tls: file.agtp.as_ref().and_then(|a| a.tls),
            agtp_insecure: file.agtp.as_ref().and_then(|a| a.insecure),
            memory_serve: file.memory.as_ref().and_then(|m| m.serve),
            memory_embedder: file.memory.as_ref().and_then(|m| m.embedder.clone()),
            memory_base_url: file.memory.as_ref().and_then(|m| m.base_url.clone()),
            memory_model: file.memory.as_ref().and_then(|m| m.model.clone()),
            memory_api_key: file.memory.as_ref().and_then(|m| m.api_key.clone()),
            memory_workers: file.memory.as_ref().and_then(|m| m.workers),
            memory_max_memories: file.memory.as_ref().and_then(|m| m.max_memories),
            memory_peer_rate: file.memory.as_ref().and_then(|m| m.peer_rate),
            learning_reflector: file.learning.as_ref().and_then(|l| l.reflector.clone()),
            learning_base_url: file.learning.as_ref().and_then(|l| l.base_url.clone()),
            learning_model: file.learning.as_ref().and_then(|l| l.model.clone()),
            learning_api_key: file.learning.as_ref().and_then(|l| l.api_key.clone()),
            learning_timeout_ms: file.learning.as_ref().and_then(|l| l.timeout_ms),
            learning_max_playbooks: file.learning.as_ref().and_then(|l| l.max_playbooks),
            learning_max_bullets: file.learning.as_ref().and_then(|l| l.max_bullets),
            improving_share: file.improving.as_ref().and_then(|i| i.share),
            improving_task_types: file
                .improving
                .as_mut()
                .and_then(|i| i.task_types.take())
                .map(OneOrMany::into_vec)
                .unwrap_or_default(),
            improving_max_library: file.improving.as_ref().and_then(|i| i.max_library),
            improving_max_task_types: file.improving.as_ref().and_then(|i| i.max_task_types),
            improving_min_reward: file.improving.as_ref().and_then(|i| i.min_reward),
            improving_base_url: file.improving.as_ref().and_then(|i| i.base_url.clone()),
            improving_model: file.improving.as_ref().and_then(|i| i.model.clone()),
            improving_api_key: file.improving.as_ref().and_then(|i| i.api_key.clone()),
            improving_timeout_ms: file.improving.as_ref().and_then(|i| i.timeout_ms),
            payments_wallet_key_file: file
                .payments
                .as_ref()
                .and_then(|p| p.wallet_key_file.clone()),
            payments_challenge_ttl_secs: file.payments.as_ref().and_then(|p| p.challenge_ttl_secs),
            log_level: file.log.as_ref().and_then(|l| l.level.clone()),
            log_format: file.log.as_ref().and_then(|l| l.format.clone()),
        })?;
        if let Some(agtp) = file.agtp {
            self.apply_agtp(agtp, path)?;
        }
        if let Some(agh) = file.agh {
            if let Some(age) = agh.replay_age {
                if age <= 0 {
                    return Err(invalid(
                        "agh.replay_age",
                        "must be a positive number of seconds",
                    ));
                }
                self.agh.replay_age = age;
            }
            if let Some(r) = agh.reference_admission {
                self.agh.reference_admission = r;
            }
            if let Some(nats) = agh.nats {
                let base = path.parent().unwrap_or_else(|| Path::new(""));
                self.agh.nats = Some(nats.into_config(base)?);
            }
        }
        Ok(())
    }

    /// Applies one layer of overrides.
    pub fn apply(&mut self, o: Overrides) -> Result<(), ConfigError> {
        self.apply_access(&o)?;
        self.apply_memory(&o)?;
        self.apply_learning(&o)?;
        self.apply_improving(&o)?;
        if let Some(f) = &o.payments_wallet_key_file {
            if f.as_os_str().is_empty() {
                return Err(invalid("payments.wallet_key_file", "must not be empty"));
            }
            self.payments.wallet_key_file = Some(f.clone());
        }
        if let Some(t) = o.payments_challenge_ttl_secs {
            if !(10..=86_400).contains(&t) {
                return Err(invalid("payments.challenge_ttl_secs", "must be 10..86400"));
            }
            self.payments.challenge_ttl_secs = Some(t);
        }
        if let Some(l) = &o.log_level {
            if l.trim().is_empty() {
                return Err(invalid("log.level", "must not be empty"));
            }
            self.log.level = Some(l.clone());
        }
        if let Some(f) = &o.log_format {
            self.log.format = f.parse().map_err(|e: String| invalid("log.format", &e))?;
        }
        if let Some(d) = o.data {
            self.data = d;
        }
        if !o.p2p_listen.is_empty() {
            self.p2p_listen = parse_multiaddrs(&o.p2p_listen, "p2p_listen")?;
        }
        for (value, slot, key) in [
            (o.agh_listen, &mut self.agh_listen, "agh_listen"),
            (o.http_listen, &mut self.http_listen, "http_listen"),
            (o.rpc_listen, &mut self.rpc_listen, "rpc_listen"),
            (o.agtp_listen, &mut self.agtp_listen, "agtp_listen"),
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
            if secs == 0 {
                return Err(invalid("greet_interval", "must be at least 1 second"));
            }
            self.greet_interval = Duration::from_secs(secs);
        }
        if !o.nats.is_empty() {
            o.nats
                .apply_to(self.agh.nats.get_or_insert_with(NatsConfig::default));
        }
        if let Some(t) = o.agtp_tls {
            self.agtp.tls = t;
        }
        if let Some(i) = o.agtp_insecure {
            self.agtp.insecure = i;
        }
        for (value, slot, key) in [
            (o.rpc_conn_rate, &mut self.rpc_conn_rate, "rpc.conn_rate"),
            (o.rpc_key_rate, &mut self.rpc_key_rate, "rpc.key_rate"),
        ] {
            if let Some(v) = value {
                if !(v.is_finite() && v >= 1.0) {
                    return Err(invalid(key, "must be at least 1 request per second"));
                }
                *slot = v;
            }
        }
        if let Some(n) = o.rpc_conn_frames {
            if n == 0 {
                return Err(invalid("rpc.conn_frames", "must be at least 1"));
            }
            self.rpc_conn_frames = n;
        }
        // A connection must be able to hold one message of the largest size.
        for (value, slot, key) in [
            (o.rpc_conn_bytes, &mut self.rpc_conn_bytes, "rpc.conn_bytes"),
            (
                o.rpc_total_bytes,
                &mut self.rpc_total_bytes,
                "rpc.total_bytes",
            ),
        ] {
            if let Some(v) = value {
                if v < crate::faces::rpc::MAX_MESSAGE_BYTES {
                    return Err(invalid(
                        key,
                        "must be at least 1048576 bytes (one message of the largest size)",
                    ));
                }
                *slot = v;
            }
        }
        if let Some(secs) = o.rpc_write_timeout {
            if secs == 0 {
                return Err(invalid(
                    "rpc.write_timeout_secs",
                    "must be at least 1 second",
                ));
            }
            self.rpc_write_timeout = Duration::from_secs(secs);
        }
        if let Some(n) = o.rpc_guard_workers {
            if !(1..=64).contains(&n) {
                return Err(invalid("rpc.guard_workers", "must be 1..64"));
            }
            self.rpc_guard_workers = n;
        }
        if let Some(ms) = o.rpc_guard_budget_ms {
            if !(10..=600_000).contains(&ms) {
                return Err(invalid(
                    "rpc.guard_budget_ms",
                    "must be 10..600000 milliseconds",
                ));
            }
            self.rpc_guard_budget = Duration::from_millis(ms);
        }
        Ok(())
    }

    /// Applies the `[memory]` settings of one layer.
    fn apply_memory(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        let m = &mut self.memory;
        if let Some(serve) = o.memory_serve {
            m.serve = serve;
        }
        if let Some(e) = &o.memory_embedder {
            let e = e.trim();
            if !MEMORY_EMBEDDERS.contains(&e) {
                return Err(invalid(
                    "memory.embedder",
                    &format!("{e:?} is not one of auto, minilm, lexical, openai"),
                ));
            }
            e.clone_into(&mut m.embedder);
        }
        m.endpoint.apply(
            "memory",
            o.memory_base_url.as_ref(),
            o.memory_model.as_ref(),
            o.memory_api_key.as_ref(),
        )?;
        if let Some(n) = o.memory_workers {
            if !(1..=64).contains(&n) {
                return Err(invalid("memory.workers", "must be 1..64"));
            }
            m.workers = n;
        }
        if let Some(n) = o.memory_max_memories {
            if !(1..=10_000_000).contains(&n) {
                return Err(invalid("memory.max_memories", "must be 1..10000000"));
            }
            m.max_memories = n;
        }
        if let Some(r) = o.memory_peer_rate {
            if !(1.0..=1_000_000.0).contains(&r) {
                return Err(invalid("memory.peer_rate", "must be 1..1000000"));
            }
            m.peer_rate = r;
        }
        Ok(())
    }

    /// Applies the `[improving]` settings of one layer.
    fn apply_improving(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        let i = &mut self.improving;
        if let Some(b) = o.improving_share {
            i.share = b;
        }
        if !o.improving_task_types.is_empty() {
            for t in &o.improving_task_types {
                if !agora_hyperspace::improving::trajectory::valid_task_type(t) {
                    return Err(invalid(
                        "improving.task_types",
                        &format!("{t:?} is not 1..=64 bytes of letters, digits, '.', '_' or '-'"),
                    ));
                }
            }
            i.task_types.clone_from(&o.improving_task_types);
        }
        if let Some(n) = o.improving_max_library {
            if !(1..=1_000_000).contains(&n) {
                return Err(invalid("improving.max_library", "must be 1..1000000"));
            }
            i.max_library = n;
        }
        if let Some(n) = o.improving_max_task_types {
            if !(1..=100_000).contains(&n) {
                return Err(invalid("improving.max_task_types", "must be 1..100000"));
            }
            i.max_task_types = n;
        }
        if let Some(r) = o.improving_min_reward {
            if !(-1.0..=1.0).contains(&r) {
                return Err(invalid("improving.min_reward", "must be -1..1"));
            }
            i.min_reward = r;
        }
        i.endpoint.apply(
            "improving",
            o.improving_base_url.as_ref(),
            o.improving_model.as_ref(),
            o.improving_api_key.as_ref(),
        )?;
        if let Some(t) = o.improving_timeout_ms {
            if !(100..=600_000).contains(&t) {
                return Err(invalid("improving.timeout_ms", "must be 100..600000"));
            }
            i.timeout_ms = t;
        }
        Ok(())
    }

    /// Applies the `[learning]` settings of one layer.
    fn apply_learning(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        let l = &mut self.learning;
        if let Some(r) = &o.learning_reflector {
            let r = r.trim();
            if !["builtin", "openai"].contains(&r) {
                return Err(invalid(
                    "learning.reflector",
                    &format!("{r:?} is not builtin or openai"),
                ));
            }
            r.clone_into(&mut l.reflector);
        }
        l.endpoint.apply(
            "learning",
            o.learning_base_url.as_ref(),
            o.learning_model.as_ref(),
            o.learning_api_key.as_ref(),
        )?;
        if let Some(t) = o.learning_timeout_ms {
            if !(100..=600_000).contains(&t) {
                return Err(invalid("learning.timeout_ms", "must be 100..600000"));
            }
            l.timeout_ms = t;
        }
        if let Some(n) = o.learning_max_playbooks {
            if !(1..=1_000_000).contains(&n) {
                return Err(invalid("learning.max_playbooks", "must be 1..1000000"));
            }
            l.max_playbooks = n;
        }
        if let Some(n) = o.learning_max_bullets {
            if !(1..=100_000).contains(&n) {
                return Err(invalid("learning.max_bullets", "must be 1..100000"));
            }
            l.max_bullets = n;
        }
        Ok(())
    }

    /// Applies the API key, the connection limits and the access settings of one layer.
    fn apply_access(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        let key = match (&o.api_key, &o.rpc_api_key) {
            (Some(a), Some(r)) if a.trim() != r.trim() => {
                return Err(invalid(
                    "api_key",
                    "api_key and rpc.api_key (AGORA_API_KEY and AGORA_RPC_API_KEY) name the same \
                     setting and differ: set one",
                ));
            }
            (Some(k), _) => Some(("api_key", k)),
            (None, Some(k)) => Some(("rpc.api_key", k)),
            (None, None) => None,
        };
        if let Some((name, key)) = key {
            let key = key.trim();
            if key.chars().count() < 16 {
                return Err(invalid(name, "must be at least 16 characters"));
            }
            if !key.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid(
                    name,
                    "must be printable ASCII without spaces (it travels in an HTTP header)",
                ));
            }
            self.api_key = Some(key.to_owned());
        }
        if let Some(n) = o.max_connections {
            if !(1..=1_000_000).contains(&n) {
                return Err(invalid("max_connections", "must be 1 to 1000000"));
            }
            self.faces.max_connections = n;
        }
        for (value, slot, key) in [
            (
                o.header_timeout,
                &mut self.faces.header_timeout,
                "header_timeout",
            ),
            (
                o.request_timeout,
                &mut self.faces.request_timeout,
                "request_timeout",
            ),
            (
                o.ws_idle_timeout,
                &mut self.faces.ws_idle_timeout,
                "ws_idle_timeout",
            ),
        ] {
            if let Some(secs) = value {
                if !(1..=86_400).contains(&secs) {
                    return Err(invalid(key, "must be 1 to 86400 seconds"));
                }
                *slot = Duration::from_secs(secs);
            }
        }
        if !o.allowed_origins.is_empty() {
            self.allowed_origins = o
                .allowed_origins
                .iter()
                .map(|v| parse_origin(v))
                .collect::<Result<_, _>>()?;
        }
        if !o.allowed_hosts.is_empty() {
            self.allowed_hosts = o
                .allowed_hosts
                .iter()
                .map(|v| parse_host(v))
                .collect::<Result<_, _>>()?;
        }
        if let Some(p) = o.public_reads {
            self.public_reads = p;
        }
        if let Some(n) = o.agh_max_channels {
            if !(1..=100_000).contains(&n) {
                return Err(invalid("agh.max_channels", "must be 1 to 100000"));
            }
            self.agh.max_channels = n;
        }
        Ok(())
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

    /// Applies `[agtp]`; relative paths are taken from the configuration file's directory.
    fn apply_agtp(&mut self, f: FileAgtp, path: &Path) -> Result<(), ConfigError> {
        let base = path.parent().unwrap_or_else(|| Path::new(""));
        let rel = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let a = &mut self.agtp;
        if let Some(name) = f.name {
            if name.trim().is_empty() || name.len() > 256 {
                return Err(invalid("agtp.name", "must be 1 to 256 characters"));
            }
            a.name = Some(name);
        }
        a.cert = f.cert.map(rel);
        a.key = f.key.map(rel);
        if a.cert.is_some() != a.key.is_some() {
            return Err(invalid("agtp.cert", "agtp.cert and agtp.key go together"));
        }
        if let Some(names) = f.tls_names {
            a.tls_names = names;
        }
        if let Some(code) = f.scope_violation_code {
            if !matches!(code, 451 | 455 | 262) {
                return Err(invalid(
                    "agtp.scope_violation_code",
                    "must be 451, 455 or 262",
                ));
            }
            a.scope_violation_code = code;
        }
        if let Some(w) = f.weights {
            let weights = [w.trust_tier, w.behavioral_trust, w.capability_match];
            let sum: f64 = weights.iter().sum();
            if weights.iter().any(|x| !x.is_finite() || *x < 0.0) || (sum - 1.0).abs() > 1e-9 {
                return Err(invalid("agtp.weights", "must be non-negative and sum to 1"));
            }
            a.weights = weights;
        }
        for (value, slot, key) in [
            (f.rate, &mut a.rate, "agtp.rate"),
            (f.burst, &mut a.burst, "agtp.burst"),
        ] {
            if let Some(v) = value {
                if !(v.is_finite() && v > 0.0) {
                    return Err(invalid(key, "must be a positive number"));
                }
                *slot = v;
            }
        }
        for (value, slot, key, unit) in [
            (
                f.refresh_interval,
                &mut a.refresh_interval,
                "agtp.refresh_interval",
                1000,
            ),
            (
                f.refresh_retry,
                &mut a.refresh_retry,
                "agtp.refresh_retry",
                1000,
            ),
            (
                f.refresh_timeout_ms,
                &mut a.refresh_timeout,
                "agtp.refresh_timeout_ms",
                1,
            ),
            (
                f.federation_deadline_ms,
                &mut a.federation_deadline,
                "agtp.federation_deadline_ms",
                1,
            ),
        ] {
            if let Some(v) = value {
                if v == 0 {
                    return Err(invalid(key, "must be positive"));
                }
                *slot = Duration::from_millis(v.saturating_mul(unit));
            }
        }
        if let Some(keys) = f.governance_keys {
            a.governance_keys = keys.into_iter().map(rel).collect();
        }
        if let Some(name) = f.unregistered_scope_claims {
            a.unregistered_scope_claims = agora_agtp::scope::UnregisteredClaims::from_name(&name)
                .ok_or_else(|| {
                invalid(
                    "agtp.unregistered_scope_claims",
                    "must be \"asserted\" or \"refused\"",
                )
            })?;
        }
        if let Some(open) = f.population_open {
            a.population_open = open;
        }
        if let Some(peers) = f.peers {
            a.peers = peers
                .into_iter()
                .map(|p| PeerConfig {
                    name: p.name,
                    endpoint: p.endpoint,
                    key: rel(p.key),
                    ca: p.ca.map(rel),
                    tls: p.tls,
                })
                .collect();
        }
        Ok(())
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

/// An origin as browsers send it, `scheme://host[:port]`, lowercased.
fn parse_origin(value: &str) -> Result<String, ConfigError> {
    let v = value.trim().trim_end_matches('/').to_ascii_lowercase();
    let bad = || {
        invalid(
            "allowed_origins",
            &format!("{value:?} is not an origin (http:// or https://, a host, an optional port)"),
        )
    };
    let authority = v
        .strip_prefix("http://")
        .or_else(|| v.strip_prefix("https://"))
        .ok_or_else(bad)?;
    parse_host(authority).map_err(|_| bad())?;
    Ok(v)
}

/// A host name or IP literal with an optional port, lowercased.
fn parse_host(value: &str) -> Result<String, ConfigError> {
    let v = value.trim().to_ascii_lowercase();
    let (name, port) = serve::split_port(&v);
    let port_ok = port.is_some() || !v[name.len()..].starts_with(':');
    let literal = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .is_some_and(|n| n.parse::<std::net::Ipv6Addr>().is_ok());
    let dns = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if port_ok && (literal || dns) {
        Ok(v)
    } else {
        Err(invalid(
            "allowed_hosts",
            &format!("{value:?} is not a host name, IP address or name:port"),
        ))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `toml` as a config file is refused with an error that starts with `key`.
    fn refused(toml: &str, key: &str) {
        let err = Config::default()
            .apply_file(toml, Path::new("agora.toml"))
            .unwrap_err();
        assert!(err.to_string().starts_with(key), "{toml}: {err}");
    }

    #[test]
    fn defaults_are_loopback_only() {
        let c = Config::default();
        for a in [c.agh_listen, c.http_listen, c.rpc_listen, c.agtp_listen] {
            assert!(a.ip().is_loopback());
        }
        assert_eq!(c.rpc_listen.port(), 3100);
        assert_eq!(c.agtp_listen.port(), 4480);
        assert_eq!(c.greet_interval, Duration::from_secs(30));
        assert_eq!(c.data, PathBuf::from("agora-data"));
    }

    #[test]
    fn nats_settings_layer_and_are_checked() {
        let mut c = Config::default();
        c.apply_file(
            r#"
            [agh.nats]
            servers = ["nats://127.0.0.1:4222", "tls://127.0.0.1:4223"]
            user = "agora"
            password_file = "secrets/nats-password"
            ca_file = "/etc/nats/ca.pem"
            "#,
            Path::new("conf/agora.toml"),
        )
        .unwrap();
        c.validate().unwrap();
        let n = c.agh.nats.clone().unwrap();
        assert_eq!(n.servers.len(), 2);
        assert_eq!(
            n.password,
            Some(Secret::File(PathBuf::from("conf/secrets/nats-password")))
        );
        assert_eq!(n.ca_file, Some(PathBuf::from("/etc/nats/ca.pem")));
        assert!(!n.tls_required);

        // The environment replaces the servers and adds settings; secrets never show in Debug.
        let env = Config::env_overrides(|k| match k {
            "AGORA_AGH_NATS_URL" => Some("nats://127.0.0.1:1, nats://127.0.0.1:2".into()),
            "AGORA_AGH_NATS_PASSWORD" => Some("hunter2".into()),
            "AGORA_AGH_NATS_TLS_REQUIRED" => Some("true".into()),
            _ => None,
        })
        .unwrap();
        c.apply(env).unwrap();
        c.validate().unwrap();
        let n = c.agh.nats.clone().unwrap();
        assert_eq!(n.servers, ["nats://127.0.0.1:1", "nats://127.0.0.1:2"]);
        assert!(n.tls_required);
        assert_eq!(n.password, Some(Secret::Value("hunter2".into())));
        assert!(!format!("{c:?}").contains("hunter2"));

        // Two authentication methods, a user without a password, a lone cert, no server,
        // credentials in a URL, url and servers together.
        let token =
            Config::env_overrides(|k| (k == "AGORA_AGH_NATS_TOKEN").then(|| "t".to_owned()))
                .unwrap();
        let mut both = c.clone();
        both.apply(token).unwrap();
        let err = both.validate().unwrap_err().to_string();
        assert!(err.contains("at most one"), "{err}");
        for (text, key) in [
            (
                "[agh.nats]\nurl = \"nats://h:1\"\nuser = \"u\"",
                "agh.nats.user",
            ),
            (
                "[agh.nats]\nurl = \"nats://h:1\"\ncert_file = \"c.pem\"",
                "agh.nats.cert_file",
            ),
            ("[agh.nats]\ntls_required = true", "no server"),
            (
                "[agh.nats]\nurl = \"nats://u:p@h:1\"",
                "credentials in the URL",
            ),
        ] {
            let mut c = Config::default();
            c.apply_file(text, Path::new("agora.toml")).unwrap();
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
        let mut c = Config::default();
        let err = c
            .apply_file(
                "[agh.nats]\nurl = \"nats://h:1\"\nservers = [\"nats://h:2\"]",
                Path::new("agora.toml"),
            )
            .unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
    }

    #[test]
    fn layers_override_in_order() {
        let mut c = Config::default();
        c.apply_file(
            r#"
            data = "/srv/agora"
            agh_listen = "127.0.0.1:0"
            bootstrap = "/ip4/127.0.0.1/tcp/4002"
            greet_interval = 5
            [agh]
            replay_age = 60
            [agh.nats]
            url = "nats://127.0.0.1:4222"
            "#,
            Path::new("agora.toml"),
        )
        .unwrap();
        assert_eq!(c.data, PathBuf::from("/srv/agora"));
        assert_eq!(c.agh_listen.port(), 0);
        assert_eq!(c.bootstrap.len(), 1);
        assert_eq!(c.agh.replay_age, 60);
        assert_eq!(
            c.agh.nats.as_ref().unwrap().servers,
            ["nats://127.0.0.1:4222"]
        );
        let env = Config::env_overrides(|k| match k {
            "AGORA_GREET_INTERVAL" => Some("2".into()),
            "AGORA_BOOTSTRAP" => Some("/ip4/127.0.0.1/tcp/1, /ip4/127.0.0.1/tcp/2".into()),
            _ => None,
        })
        .unwrap();
        c.apply(env).unwrap();
        assert_eq!(c.greet_interval, Duration::from_secs(2));
        assert_eq!(c.bootstrap.len(), 2);
        c.apply(Overrides {
            greet_interval: Some(1),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(c.greet_interval, Duration::from_secs(1));
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let mut c = Config::default();
        let err = c
            .apply(Overrides {
                agh_listen: Some("localhost".into()),
                ..Overrides::default()
            })
            .unwrap_err();
        assert!(err.to_string().starts_with("agh_listen:"), "{err}");
        let err = c
            .apply_file("unknown_key = 1", Path::new("agora.toml"))
            .unwrap_err();
        assert!(err.to_string().contains("unknown"), "{err}");
        let err = c
            .apply(Overrides {
                bootstrap: vec!["not-an-addr".into()],
                ..Overrides::default()
            })
            .unwrap_err();
        assert!(err.to_string().starts_with("bootstrap:"), "{err}");
        assert!(
            c.apply(Overrides {
                greet_interval: Some(0),
                ..Overrides::default()
            })
            .is_err()
        );
    }

    #[test]
    fn environment_values_that_do_not_parse_are_errors() {
        for (key, value) in [
            ("AGORA_GREET_INTERVAL", "30s"),
            ("AGORA_PEERS_LOW", "-1"),
            ("AGORA_PEERS_HIGH", "many"),
            ("AGORA_RPC_CONN_RATE", "fast"),
            ("AGORA_RPC_KEY_RATE", "1e"),
            ("AGORA_AGTP_TLS", "maybe"),
            ("AGORA_AGTP_INSECURE", "2"),
        ] {
            let err = Config::env_overrides(|k| (k == key).then(|| value.to_owned())).unwrap_err();
            assert!(err.to_string().starts_with(&format!("{key}:")), "{err}");
        }
        let o = Config::env_overrides(|k| match k {
            "AGORA_AGTP_TLS" => Some(" Yes ".into()),
            "AGORA_AGTP_INSECURE" => Some("off".into()),
            "AGORA_PEERS_LOW" => Some(" 3 ".into()),
            "AGORA_PEERS_HIGH" => Some(" ".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(o.agtp_tls, Some(true));
        assert_eq!(o.agtp_insecure, Some(false));
        assert_eq!(o.peers_low, Some(3));
        assert_eq!(o.peers_high, None);
    }

    #[test]
    fn face_limits_and_access_settings_layer() {
        let mut c = Config::default();
        assert_eq!(c.faces, serve::Limits::default());
        c.apply_file(
            r#"
            api_key = "0123456789abcdef"
            max_connections = 20
            header_timeout = 2
            allowed_origins = ["https://App.Example/"]
            allowed_hosts = "node.example"
            public_reads = true
            [agh]
            max_channels = 8
            "#,
            Path::new("agora.toml"),
        )
        .unwrap();
        assert_eq!(c.api_key.as_deref(), Some("0123456789abcdef"));
        assert_eq!(c.faces.max_connections, 20);
        assert_eq!(c.faces.header_timeout, Duration::from_secs(2));
        assert_eq!(c.allowed_origins, ["https://app.example"]);
        assert_eq!(c.allowed_hosts, ["node.example"]);
        assert!(c.public_reads);
        assert_eq!(c.agh.max_channels, 8);
        let env = Config::env_overrides(|k| match k {
            "AGORA_RPC_API_KEY" => Some("fedcba9876543210".into()),
            "AGORA_WS_IDLE_TIMEOUT" => Some("7".into()),
            "AGORA_ALLOWED_HOSTS" => Some("a.example, [::1]:8080".into()),
            _ => None,
        })
        .unwrap();
        c.apply(env).unwrap();
        assert_eq!(
            c.api_key.as_deref(),
            Some("fedcba9876543210"),
            "the older name"
        );
        assert_eq!(c.faces.ws_idle_timeout, Duration::from_secs(7));
        assert_eq!(c.allowed_hosts, ["a.example", "[::1]:8080"]);
        c.validate().unwrap();
    }

    #[test]
    fn bad_access_settings_name_their_key() {
        for (toml, key) in [
            ("api_key = \"short\"", "api_key:"),
            ("[rpc]\napi_key = \"short\"", "rpc.api_key:"),
            ("api_key = \"with a space 0123\"", "api_key:"),
            (
                "api_key = \"0123456789abcdef\"\n[rpc]\napi_key = \"0123456789abcdeX\"",
                "api_key:",
            ),
            ("max_connections = 0", "max_connections:"),
            ("header_timeout = 0", "header_timeout:"),
            ("ws_idle_timeout = 86401", "ws_idle_timeout:"),
            ("allowed_origins = \"evil.example\"", "allowed_origins:"),
            (
                "allowed_origins = \"http://a.example/path\"",
                "allowed_origins:",
            ),
            ("allowed_hosts = [\"a b\"]", "allowed_hosts:"),
            ("allowed_hosts = \"a.example:port\"", "allowed_hosts:"),
            ("[agh]\nmax_channels = 0", "agh.max_channels:"),
        ] {
            refused(toml, key);
        }
        for face in ["agh_listen", "http_listen", "rpc_listen"] {
            let mut c = Config::default();
            c.apply_file(&format!("{face} = \"0.0.0.0:0\""), Path::new("agora.toml"))
                .unwrap();
            let err = c.validate().unwrap_err().to_string();
            assert!(err.starts_with("api_key:") && err.contains(face), "{err}");
            c.apply_file("api_key = \"0123456789abcdef\"", Path::new("agora.toml"))
                .unwrap();
            c.validate().unwrap();
        }
    }

    #[test]
    fn json_rpc_flow_limits_layer_and_are_checked() {
        let mut c = Config::default();
        assert_eq!(c.rpc_conn_frames, crate::faces::rpc::CONN_FRAMES);
        c.apply_file(
            "[rpc]\nconn_frames = 8\nconn_bytes = 2097152\nwrite_timeout_secs = 5",
            Path::new("agora.toml"),
        )
        .unwrap();
        let env = Config::env_overrides(|k| {
            (k == "AGORA_RPC_TOTAL_BYTES").then(|| "16777216".to_owned())
        })
        .unwrap();
        c.apply(env).unwrap();
        assert_eq!(c.rpc_conn_frames, 8);
        assert_eq!(c.rpc_conn_bytes, 2 << 20);
        assert_eq!(c.rpc_total_bytes, 16 << 20);
        assert_eq!(c.rpc_write_timeout, Duration::from_secs(5));
        c.apply_file(
            "[rpc]\nguard_workers = 3\nguard_budget_ms = 500",
            Path::new("agora.toml"),
        )
        .unwrap();
        assert_eq!(c.rpc_guard_workers, 3);
        assert_eq!(c.rpc_guard_budget, Duration::from_millis(500));
        for (toml, key) in [
            ("[rpc]\nconn_frames = 0", "rpc.conn_frames:"),
            ("[rpc]\nconn_bytes = 1000", "rpc.conn_bytes:"),
            ("[rpc]\ntotal_bytes = 1000", "rpc.total_bytes:"),
            ("[rpc]\nwrite_timeout_secs = 0", "rpc.write_timeout_secs:"),
            ("[rpc]\nguard_workers = 0", "rpc.guard_workers:"),
            ("[rpc]\nguard_budget_ms = 1", "rpc.guard_budget_ms:"),
        ] {
            refused(toml, key);
        }
    }

    #[test]
    fn memory_settings_layer_and_are_checked() {
        let mut c = Config::default();
        assert_eq!(c.memory, MemoryConfig::default());
        c.apply_file(
            "[memory]\nserve = false\nembedder = \"lexical\"\nworkers = 3\nmax_memories = 1000",
            Path::new("agora.toml"),
        )
        .unwrap();
        assert!(!c.memory.serve);
        assert_eq!(c.memory.embedder, "lexical");
        assert_eq!((c.memory.workers, c.memory.max_memories), (3, 1000));
        let env = Config::env_overrides(|k| match k {
            "AGORA_MEMORY_SERVE" => Some("on".to_owned()),
            "AGORA_MEMORY_EMBEDDER" => Some("minilm".to_owned()),
            _ => None,
        })
        .unwrap();
        c.apply(env).unwrap();
        assert!(c.memory.serve);
        assert_eq!(c.memory.embedder, "minilm");
        for (toml, key) in [
            ("[memory]\nembedder = \"gpt\"", "memory.embedder:"),
            ("[memory]\nbase_url = \"ftp://x\"", "memory.base_url:"),
            ("[memory]\nmodel = \"\"", "memory.model:"),
            ("[memory]\nworkers = 0", "memory.workers:"),
            ("[memory]\nmax_memories = 0", "memory.max_memories:"),
            ("[memory]\npeer_rate = 0.5", "memory.peer_rate:"),
        ] {
            refused(toml, key);
        }
    }

    #[test]
    fn openai_embedder_needs_its_endpoint_and_keeps_keys_off_plain_networks() {
        let checked = |toml: &str| {
            let mut c = Config::default();
            c.apply_file(toml, Path::new("agora.toml")).unwrap();
            c.validate().map(|()| c)
        };
        let base = "[memory]\nembedder = \"openai\"\n";
        for (extra, key) in [
            ("model = \"m\"", "memory.base_url:"),
            ("base_url = \"http://127.0.0.1:11434/v1\"", "memory.model:"),
            (
                "base_url = \"http://10.0.0.5:8080/v1\"\nmodel = \"m\"\napi_key = \"k\"",
                "memory.base_url:",
            ),
        ] {
            let err = checked(&format!("{base}{extra}")).unwrap_err();
            assert!(err.to_string().starts_with(key), "{extra}: {err}");
        }
        for url in [
            "http://127.0.0.1:11434/v1",
            "http://localhost/v1",
            "http://[::1]:8080/v1",
            "https://10.0.0.5/v1",
        ] {
            let c = checked(&format!(
                "{base}base_url = \"{url}\"\nmodel = \"m\"\napi_key = \"k\""
            ))
            .unwrap();
            assert_eq!(c.memory.endpoint.base_url.as_deref(), Some(url));
            assert_eq!(c.memory.endpoint.api_key.as_deref(), Some("k"));
        }
        // Without a key, plain http to another host is the operator's call.
        checked(&format!(
            "{base}base_url = \"http://10.0.0.5/v1\"\nmodel = \"m\""
        ))
        .unwrap();
        assert!(!is_loopback_url("http://127.0.0.1@10.0.0.5/v1"));
        assert!(!is_loopback_url("http://[::2]:80/v1"));
        assert!(is_loopback_url("http://user@127.0.0.2:9/v1"));
    }

    #[test]
    fn learning_settings_layer_and_are_checked() {
        let mut c = Config::default();
        assert_eq!(c.learning, LearningConfig::default());
        c.apply_file(
            "[learning]\nreflector = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"\ntimeout_ms = 500\nmax_playbooks = 3\nmax_bullets = 10",
            Path::new("agora.toml"),
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.learning.reflector, "openai");
        assert_eq!(c.learning.endpoint.model.as_deref(), Some("m"));
        assert_eq!(
            (
                c.learning.timeout_ms,
                c.learning.max_playbooks,
                c.learning.max_bullets
            ),
            (500, 3, 10)
        );
        for (toml, key) in [
            ("[learning]\nreflector = \"gpt\"", "learning.reflector:"),
            ("[learning]\ntimeout_ms = 5", "learning.timeout_ms:"),
            ("[learning]\nmax_bullets = 0", "learning.max_bullets:"),
            ("[learning]\nbase_url = \"x\"", "learning.base_url:"),
        ] {
            refused(toml, key);
        }
        let mut c = Config::default();
        c.apply_file(
            "[learning]\nreflector = \"openai\"",
            Path::new("agora.toml"),
        )
        .unwrap();
        let err = c.validate().unwrap_err();
        assert!(err.to_string().starts_with("learning.base_url:"), "{err}");
    }

    #[test]
    fn improving_settings_layer_and_are_checked() {
        let mut c = Config::default();
        assert_eq!(c.improving, ImprovingConfig::default());
        assert!(!c.improving.share, "sharing is opt-in");
        c.apply_file(
            "[improving]\nshare = true\ntask_types = [\"web-research\", \"code.review\"]\nmax_library = 50\nmin_reward = 0.5\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"",
            Path::new("agora.toml"),
        )
        .unwrap();
        c.validate().unwrap();
        assert!(c.improving.share);
        assert_eq!(c.improving.task_types, ["web-research", "code.review"]);
        assert_eq!(c.improving.max_library, 50);
        let env = Config::env_overrides(|k| {
            (k == "AGORA_IMPROVING_TASK_TYPES").then(|| "a, b".to_owned())
        })
        .unwrap();
        c.apply(env).unwrap();
        assert_eq!(c.improving.task_types, ["a", "b"]);
        for (toml, key) in [
            ("[improving]\ntask_types = \"a/b\"", "improving.task_types:"),
            ("[improving]\nmax_library = 0", "improving.max_library:"),
            ("[improving]\nmin_reward = 2.0", "improving.min_reward:"),
            ("[improving]\ntimeout_ms = 1", "improving.timeout_ms:"),
        ] {
            refused(toml, key);
        }
        let mut c = Config::default();
        c.apply_file("[improving]\nmodel = \"m\"", Path::new("agora.toml"))
            .unwrap();
        let err = c.validate().unwrap_err();
        assert!(err.to_string().starts_with("improving.base_url:"), "{err}");
    }

    #[test]
    fn payments_settings_layer_and_are_checked() {
        let mut c = Config::default();
        assert_eq!(c.payments, PaymentsConfig::default());
        c.apply_file(
            "[payments]\nwallet_key_file = \"keys/w.key\"\nchallenge_ttl_secs = 60",
            Path::new("agora.toml"),
        )
        .unwrap();
        assert_eq!(
            c.payments.wallet_key_file,
            Some(PathBuf::from("keys/w.key"))
        );
        assert_eq!(c.payments.challenge_ttl_secs, Some(60));
        let env = Config::env_overrides(|k| {
            (k == "AGORA_PAYMENTS_CHALLENGE_TTL_SECS").then(|| "600".to_owned())
        })
        .unwrap();
        c.apply(env).unwrap();
        assert_eq!(c.payments.challenge_ttl_secs, Some(600));
        refused(
            "[payments]\nchallenge_ttl_secs = 5",
            "payments.challenge_ttl_secs:",
        );
        refused(
            "[payments]\nwallet_key_file = \"\"",
            "payments.wallet_key_file:",
        );
        refused("[payments]\nwallet = \"x\"", "");
    }

    #[test]
    fn peer_watermarks_layer_and_are_checked_together() {
        let mut c = Config::default();
        assert_eq!(c.peers, Limits::default());
        c.validate().unwrap();
        // The file raises the low mark above the default high one; only the final
        // combination is checked, so a later layer can complete it.
        c.apply_file("peers_low = 20", Path::new("agora.toml"))
            .unwrap();
        let err = c.validate().unwrap_err();
        assert!(err.to_string().starts_with("peers_high:"), "{err}");
        c.apply(Overrides {
            peers_high: Some(40),
            ..Overrides::default()
        })
        .unwrap();
        c.validate().unwrap();
        assert_eq!((c.peers.low, c.peers.high), (20, 40));
        assert_eq!(c.peers.grace, Limits::default().grace);
        c.apply(Overrides {
            peers_low: Some(0),
            ..Overrides::default()
        })
        .unwrap();
        let err = c.validate().unwrap_err();
        assert!(err.to_string().starts_with("peers_low:"), "{err}");
    }

    #[test]
    fn agtp_scope_claims_and_population_settings() {
        use agora_agtp::scope::UnregisteredClaims;
        let mut c = Config::default();
        assert_eq!(
            c.agtp.unregistered_scope_claims,
            UnregisteredClaims::Asserted
        );
        assert!(c.agtp.population_open);
        c.apply_file(
            "[agtp]\nunregistered_scope_claims = \"refused\"\npopulation_open = false",
            Path::new("agora.toml"),
        )
        .unwrap();
        assert_eq!(
            c.agtp.unregistered_scope_claims,
            UnregisteredClaims::Refused
        );
        assert!(!c.agtp.population_open);
        refused(
            "[agtp]\nunregistered_scope_claims = \"trusted\"",
            "agtp.unregistered_scope_claims:",
        );
    }
}
