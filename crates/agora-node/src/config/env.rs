//! [`SETTINGS`]: the table that declares, once per setting, its `agora.toml` key, its `AGORA_*`
//! environment variable, its `agora node` flag, its default as `--help` shows it and its one-line
//! help, and the [`ConfigPatch`] field (the layer, in the shape of `agora.toml`) it fills.
//!
//! The table drives both [`Config::env_overrides`] and the flags (the `agora` binary builds its
//! `agora node` arguments from it), so a setting's variable and flag are written in one row.
//! It is a table here rather than clap's `#[arg(env = …)]` because the environment must keep
//! its own rules, which clap does not have: a bad value is an error naming the variable
//! (`AGORA_PEERS_LOW: "x" is not a number`), switches take `1`/`true`/`yes`/`on` and
//! `0`/`false`/`no`/`off`/empty, lists are comma-separated, an empty number is unset, and the
//! file, environment and flag layers stay apart (defaults < `agora.toml` < `AGORA_*` < flags);
//! it also keeps `agora-node` free of clap. Secrets (API keys, NATS password and token) have no
//! flag, so they never need to be on a command line, and `--help` shows only their names.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use libp2p::Multiaddr;

use super::{Config, ConfigError, ConfigPatch, LogFormat, Secret, de, invalid};

/// How a setting's text, from the environment or a flag, is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Text as given: a path, an address, a name.
    Text,
    /// A secret: no flag, and `--help` shows no value.
    Secret,
    /// A whole number; an empty variable is unset.
    Integer,
    /// A decimal number; an empty variable is unset.
    Decimal,
    /// On or off: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off`, empty (case and
    /// surrounding spaces ignored). The bare flag means on.
    Switch,
    /// A list: comma-separated in the environment, one flag per value.
    List,
    /// One of these words.
    Choice(&'static [&'static str]),
}

/// One setting that `agora.toml`, the environment and a flag can set.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// Its key in `agora.toml` (`section.key`).
    pub key: &'static str,
    /// Its environment variable.
    pub env: &'static str,
    /// Its `agora node` flag without the dashes; secrets have none.
    pub flag: Option<&'static str>,
    /// How its text is read.
    pub kind: Kind,
    /// What it is, one line for `--help`.
    pub help: &'static str,
    /// Its default as shown to people, from [`Config::default`] where it lives there.
    pub default: fn(&Config) -> String,
    /// Stores values (one, or a list's) into a layer; `source` names the variable or flag in
    /// errors.
    set: fn(&mut ConfigPatch, Vec<String>, &str) -> Result<(), ConfigError>,
}

impl Setting {
    /// Reads the environment variable's `value` into `o`.
    fn read_env(&self, o: &mut ConfigPatch, value: String) -> Result<(), ConfigError> {
        let values = if self.kind == List {
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        } else {
            vec![value]
        };
        (self.set)(o, values, self.env)
    }

    /// Reads a flag's values (as given on the command line) into `o`.
    pub fn read_flag(&self, o: &mut ConfigPatch, values: Vec<String>) -> Result<(), ConfigError> {
        let flag = format!("--{}", self.flag.unwrap_or(self.key));
        (self.set)(o, values, &flag)
    }
}

/// A layer's value read from text.
trait FromText: Sized {
    /// The value of `values` (one, or a list's). A number or a switch that does not parse is an
    /// error naming `source` (the variable or flag); an address or a word that does not is one
    /// naming the setting's `key`, as the file's would be.
    fn from_text(values: Vec<String>, source: &str, key: &str) -> Result<Self, ConfigError>;
}

/// The last of `values` (a flag given twice keeps the last).
fn last(values: Vec<String>) -> Option<String> {
    values.into_iter().next_back()
}

impl FromText for Option<String> {
    fn from_text(values: Vec<String>, _: &str, _: &str) -> Result<Self, ConfigError> {
        Ok(last(values))
    }
}

impl FromText for Option<PathBuf> {
    fn from_text(values: Vec<String>, _: &str, _: &str) -> Result<Self, ConfigError> {
        Ok(last(values).map(PathBuf::from))
    }
}

impl FromText for Option<Secret> {
    fn from_text(values: Vec<String>, _: &str, _: &str) -> Result<Self, ConfigError> {
        Ok(last(values).map(Secret::Value))
    }
}

impl FromText for Option<Vec<String>> {
    fn from_text(values: Vec<String>, _: &str, _: &str) -> Result<Self, ConfigError> {
        Ok(Some(values).filter(|v| !v.is_empty()))
    }
}

impl FromText for Option<Vec<Multiaddr>> {
    fn from_text(values: Vec<String>, _: &str, key: &str) -> Result<Self, ConfigError> {
        let addrs = values
            .iter()
            .map(|v| de::multiaddr(v).map_err(|e| invalid(key, &e)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(addrs).filter(|v| !v.is_empty()))
    }
}

impl FromText for Option<SocketAddr> {
    fn from_text(values: Vec<String>, _: &str, key: &str) -> Result<Self, ConfigError> {
        last(values)
            .map(|v| de::socket(&v).map_err(|e| invalid(key, &e)))
            .transpose()
    }
}

impl FromText for Option<LogFormat> {
    fn from_text(values: Vec<String>, _: &str, key: &str) -> Result<Self, ConfigError> {
        last(values)
            .map(|v| v.trim().parse().map_err(|e: String| invalid(key, &e)))
            .transpose()
    }
}

impl FromText for Option<bool> {
    fn from_text(values: Vec<String>, source: &str, _: &str) -> Result<Self, ConfigError> {
        last(values).map(|v| boolean(&v, source)).transpose()
    }
}

/// Whole seconds.
impl FromText for Option<Duration> {
    fn from_text(values: Vec<String>, source: &str, key: &str) -> Result<Self, ConfigError> {
        Ok(Option::<u64>::from_text(values, source, key)?.map(Duration::from_secs))
    }
}

/// Whole milliseconds, for the settings whose key ends in `_ms`.
fn millis(values: Vec<String>, source: &str, key: &str) -> Result<Option<Duration>, ConfigError> {
    Ok(Option::<u64>::from_text(values, source, key)?.map(Duration::from_millis))
}

macro_rules! numbers {
    ($($t:ty),*) => {$(
        impl FromText for Option<$t> {
            fn from_text(values: Vec<String>, source: &str, _: &str) -> Result<Self, ConfigError> {
                Ok(last(values).map(|v| number(&v, source)).transpose()?.flatten())
            }
        }
    )*};
}
numbers!(u64, usize, f64);

/// The table's rows: `field: Kind, "toml.key", "AGORA_VAR", flag, default, "help";` where
/// `field` is the [`ConfigPatch`] field the row fills (`field [millis]` for a duration the key
/// gives in milliseconds).
macro_rules! settings {
    ($($($field:ident).+ $([$read:ident])?: $kind:expr, $key:literal, $env:literal, $flag:expr,
       $default:expr, $help:literal;)*) => {
        /// Every setting the environment and a flag can set, in `--help` order.
        pub const SETTINGS: &[Setting] = &[$(Setting {
            key: $key,
            env: $env,
            flag: $flag,
            kind: $kind,
            help: $help,
            default: $default,
            set: |o, values, source| {
                o.$($field).+ = settings!(@read values, source, $key $(, $read)?)?;
                Ok(())
            },
        }),*];
    };
    (@read $values:ident, $source:ident, $key:literal) => {
        FromText::from_text($values, $source, $key)
    };
    (@read $values:ident, $source:ident, $key:literal, $read:ident) => {
        $read($values, $source, $key)
    };
}

/// The text `--help` shows for a setting without a default.
fn none(_: &Config) -> String {
    "none".to_owned()
}

fn secs(d: Duration) -> String {
    d.as_secs().to_string()
}

use Kind::{Choice, Decimal, Integer, List, Secret as Hidden, Switch, Text};

settings! {
    data: Text, "data", "AGORA_DATA", Some("data"), |c| c.data.display().to_string(),
        "Data directory (node key and database)";
    p2p_listen: List, "p2p_listen", "AGORA_P2P_LISTEN", Some("p2p-listen"),
        |c| join(&c.p2p_listen), "libp2p listen address (repeatable)";
    agh_listen: Text, "agh_listen", "AGORA_AGH_LISTEN", Some("agh-listen"),
        |c| c.agh_listen.to_string(), "AGH WebSocket face";
    http_listen: Text, "http_listen", "AGORA_HTTP_LISTEN", Some("http-listen"),
        |c| c.http_listen.to_string(), "HTTP API face";
    rpc_listen: Text, "rpc_listen", "AGORA_RPC_LISTEN", Some("rpc-listen"),
        |c| c.rpc_listen.to_string(), "Hyperspace JSON-RPC face";
    agtp_listen: Text, "agtp_listen", "AGORA_AGTP_LISTEN", Some("agtp-listen"),
        |c| c.agtp_listen.to_string(), "AGTP face";
    bootstrap: List, "bootstrap", "AGORA_BOOTSTRAP", Some("bootstrap"), none,
        "A node to join (repeatable), e.g. /ip4/127.0.0.1/tcp/4001/p2p/<peer id>";
    peers_low: Integer, "peers_low", "AGORA_PEERS_LOW", Some("peers-low"),
        |c| c.peers_low.to_string(), "Connection manager: trim down to this many connected peers";
    peers_high: Integer, "peers_high", "AGORA_PEERS_HIGH", Some("peers-high"),
        |c| c.peers_high.to_string(),
        "Connection manager: trim only when more than this many peers are connected";
    greet_interval: Integer, "greet_interval", "AGORA_GREET_INTERVAL", Some("greet-interval"),
        |c| secs(c.greet_interval),
        "AGH greet interval in seconds (remote presence lasts twice as long)";
    agh.nats.servers: List, "agh.nats.url", "AGORA_AGH_NATS_URL", Some("agh-nats-url"), none,
        "NATS server URL (repeatable; `servers` in agora.toml), e.g. nats://127.0.0.1:4222";
    agh.nats.user: Text, "agh.nats.user", "AGORA_AGH_NATS_USER", Some("agh-nats-user"), none,
        "NATS user, with the password";
    agh.nats.password: Hidden, "agh.nats.password_file", "AGORA_AGH_NATS_PASSWORD", None, none,
        "NATS password (in agora.toml: a file holding it)";
    agh.nats.token: Hidden, "agh.nats.token_file", "AGORA_AGH_NATS_TOKEN", None, none,
        "NATS token (in agora.toml: a file holding it)";
    agh.nats.nkey_seed_file: Text, "agh.nats.nkey_seed_file", "AGORA_AGH_NATS_NKEY_SEED_FILE",
        Some("agh-nats-nkey-seed-file"), none, "File holding a NATS user NKey seed (SU…)";
    agh.nats.creds_file: Text, "agh.nats.creds_file", "AGORA_AGH_NATS_CREDS_FILE",
        Some("agh-nats-creds-file"), none, "NATS credentials file (user JWT and NKey seed)";
    agh.nats.tls_required: Switch, "agh.nats.tls_required", "AGORA_AGH_NATS_TLS_REQUIRED",
        Some("agh-nats-tls-required"), |_| "off".to_owned(), "Refuse a NATS connection without TLS";
    agh.nats.ca_file: Text, "agh.nats.ca_file", "AGORA_AGH_NATS_CA_FILE", Some("agh-nats-ca-file"),
        |_| "the Mozilla roots".to_owned(), "PEM roots to trust for NATS TLS";
    agh.nats.cert_file: Text, "agh.nats.cert_file", "AGORA_AGH_NATS_CERT_FILE",
        Some("agh-nats-cert-file"), none, "NATS client certificate chain (PEM), with its key";
    agh.nats.key_file: Text, "agh.nats.key_file", "AGORA_AGH_NATS_KEY_FILE",
        Some("agh-nats-key-file"), none, "Private key (PEM) of the NATS client certificate";
    api_key: Hidden, "api_key", "AGORA_API_KEY", None, none,
        "The node's API key, required by every HTTP and WebSocket face once set";
    rpc.api_key: Hidden, "rpc.api_key", "AGORA_RPC_API_KEY", None, none,
        "An older name of api_key";
    max_connections: Integer, "max_connections", "AGORA_MAX_CONNECTIONS",
        Some("max-connections"), |c| c.max_connections.to_string(),
        "Connections served at once by each HTTP and WebSocket face (beyond: 503)";
    header_timeout: Integer, "header_timeout", "AGORA_HEADER_TIMEOUT", Some("header-timeout"),
        |c| secs(c.header_timeout),
        "Seconds for a request's headers (or a WebSocket upgrade) to arrive; also how long an \
         HTTP connection may wait for its next request";
    request_timeout: Integer, "request_timeout", "AGORA_REQUEST_TIMEOUT",
        Some("request-timeout"), |c| secs(c.request_timeout),
        "Seconds for a request's body to arrive and its answer to be ready (beyond: 408)";
    ws_idle_timeout: Integer, "ws_idle_timeout", "AGORA_WS_IDLE_TIMEOUT",
        Some("ws-idle-timeout"), |c| secs(c.ws_idle_timeout),
        "Seconds a WebSocket may go without a frame either way before it is closed";
    allowed_origins: List, "allowed_origins", "AGORA_ALLOWED_ORIGINS", Some("allow-origin"),
        none,
        "A browser origin (scheme://host[:port]) allowed to open WebSockets and send changes \
         (repeatable); the node's own HTTP face is always allowed";
    allowed_hosts: List, "allowed_hosts", "AGORA_ALLOWED_HOSTS", Some("allow-host"), none,
        "A host name (or name:port) that names this node besides localhost and its addresses \
         (repeatable); requests for any other Host are refused with 421";
    public_reads: Switch, "public_reads", "AGORA_PUBLIC_READS", Some("public-reads"),
        |_| "off".to_owned(),
        "Answer the HTTP API's read-only endpoints (/healthz, /status, GET peers and cards) \
         without the API key";
    agh.max_channels: Integer, "agh.max_channels", "AGORA_AGH_MAX_CHANNELS",
        Some("agh-max-channels"), |c| c.agh.max_channels.to_string(),
        "Channels one agent connection may be in";
    rpc.conn_rate: Decimal, "rpc.conn_rate", "AGORA_RPC_CONN_RATE", Some("rpc-conn-rate"),
        |c| c.rpc.conn_rate.to_string(), "JSON-RPC requests per second per connection";
    rpc.key_rate: Decimal, "rpc.key_rate", "AGORA_RPC_KEY_RATE", Some("rpc-key-rate"),
        |c| c.rpc.key_rate.to_string(), "JSON-RPC requests per second per credential";
    rpc.conn_frames: Integer, "rpc.conn_frames", "AGORA_RPC_CONN_FRAMES",
        Some("rpc-conn-frames"), |c| c.rpc.conn_frames.to_string(),
        "JSON-RPC frames in flight per connection";
    rpc.conn_bytes: Integer, "rpc.conn_bytes", "AGORA_RPC_CONN_BYTES", Some("rpc-conn-bytes"),
        |c| c.rpc.conn_bytes.to_string(), "JSON-RPC bytes held per connection";
    rpc.total_bytes: Integer, "rpc.total_bytes", "AGORA_RPC_TOTAL_BYTES",
        Some("rpc-total-bytes"), |c| c.rpc.total_bytes.to_string(),
        "JSON-RPC bytes held for all connections";
    rpc.write_timeout: Integer, "rpc.write_timeout_secs", "AGORA_RPC_WRITE_TIMEOUT_SECS",
        Some("rpc-write-timeout-secs"), |c| secs(c.rpc.write_timeout),
        "Seconds one write to a JSON-RPC client may take";
    rpc.guard_workers: Integer, "rpc.guard_workers", "AGORA_RPC_GUARD_WORKERS",
        Some("rpc-guard-workers"), |c| c.rpc.guard_workers.to_string(),
        "guard.validate / guard.checkSafety calls running at once";
    rpc.guard_budget [millis]: Integer, "rpc.guard_budget_ms", "AGORA_RPC_GUARD_BUDGET_MS",
        Some("rpc-guard-budget-ms"), |c| c.rpc.guard_budget.as_millis().to_string(),
        "Milliseconds one such call may take, waiting included";
    agtp.tls: Switch, "agtp.tls", "AGORA_AGTP_TLS", Some("agtp-tls"), |_| "off".to_owned(),
        "Serve the AGTP face over TLS even on a loopback address";
    agtp.insecure: Switch, "agtp.insecure", "AGORA_AGTP_INSECURE", Some("insecure"),
        |_| "off".to_owned(),
        "Serve the AGTP face as plain AGTP even beyond loopback (no TLS; for testing only)";
    memory.serve: Switch, "memory.serve", "AGORA_MEMORY_SERVE", Some("memory-serve"),
        |c| on_off(c.memory.serve), "Hold memories and join the ring";
    memory.embedder: Text, "memory.embedder", "AGORA_MEMORY_EMBEDDER", Some("memory-embedder"),
        |c| c.memory.embedder.clone(), "auto, minilm, lexical or openai";
    memory.base_url: Text, "memory.base_url", "AGORA_MEMORY_BASE_URL", Some("memory-base-url"),
        none, "The openai embedder's API root, e.g. http://127.0.0.1:11434/v1";
    memory.model: Text, "memory.model", "AGORA_MEMORY_MODEL", Some("memory-model"), none,
        "The openai embedder's model";
    memory.api_key: Hidden, "memory.api_key", "AGORA_MEMORY_API_KEY", None, none,
        "The openai embedder's bearer token";
    memory.workers: Integer, "memory.workers", "AGORA_MEMORY_WORKERS", Some("memory-workers"),
        |c| c.memory.workers.to_string(), "Worker threads for embeddings and searches";
    memory.max_memories: Integer, "memory.max_memories", "AGORA_MEMORY_MAX_MEMORIES",
        Some("memory-max-memories"), |c| c.memory.max_memories.to_string(),
        "Most memories this node holds";
    memory.peer_rate: Decimal, "memory.peer_rate", "AGORA_MEMORY_PEER_RATE",
        Some("memory-peer-rate"), |c| c.memory.peer_rate.to_string(),
        "Node-to-node memory requests per second accepted from one peer";
    learning.reflector: Text, "learning.reflector", "AGORA_LEARNING_REFLECTOR",
        Some("learning-reflector"), |c| c.learning.reflector.clone(), "builtin or openai";
    learning.base_url: Text, "learning.base_url", "AGORA_LEARNING_BASE_URL",
        Some("learning-base-url"), none, "The openai reflector's API root";
    learning.model: Text, "learning.model", "AGORA_LEARNING_MODEL", Some("learning-model"),
        none, "The openai reflector's model";
    learning.api_key: Hidden, "learning.api_key", "AGORA_LEARNING_API_KEY", None, none,
        "The openai reflector's bearer token";
    learning.timeout_ms: Integer, "learning.timeout_ms", "AGORA_LEARNING_TIMEOUT_MS",
        Some("learning-timeout-ms"), |c| c.learning.timeout_ms.to_string(),
        "Milliseconds one LLM reflection may take";
    learning.max_playbooks: Integer, "learning.max_playbooks", "AGORA_LEARNING_MAX_PLAYBOOKS",
        Some("learning-max-playbooks"), |c| c.learning.max_playbooks.to_string(),
        "Most playbooks";
    learning.max_bullets: Integer, "learning.max_bullets", "AGORA_LEARNING_MAX_BULLETS",
        Some("learning-max-bullets"), |c| c.learning.max_bullets.to_string(),
        "Most bullets per playbook";
    improving.share: Switch, "improving.share", "AGORA_IMPROVING_SHARE", Some("improving-share"),
        |c| on_off(c.improving.share),
        "Share recorded trajectories on gossip unless a call says otherwise";
    improving.task_types: List, "improving.task_types", "AGORA_IMPROVING_TASK_TYPES",
        Some("improving-task-type"), none,
        "A task type to learn from (repeatable): its trajectory topic is joined at start";
    improving.max_library: Integer, "improving.max_library", "AGORA_IMPROVING_MAX_LIBRARY",
        Some("improving-max-library"), |c| c.improving.max_library.to_string(),
        "Most trajectories per task type";
    improving.max_task_types: Integer, "improving.max_task_types",
        "AGORA_IMPROVING_MAX_TASK_TYPES", Some("improving-max-task-types"),
        |c| c.improving.max_task_types.to_string(), "Most task types";
    improving.min_reward: Decimal, "improving.min_reward", "AGORA_IMPROVING_MIN_REWARD",
        Some("improving-min-reward"), |c| c.improving.min_reward.to_string(),
        "Least reward of a trajectory received from another node";
    improving.base_url: Text, "improving.base_url", "AGORA_IMPROVING_BASE_URL",
        Some("improving-base-url"), none, "The chat API root of augment FULL_PIPELINE";
    improving.model: Text, "improving.model", "AGORA_IMPROVING_MODEL", Some("improving-model"),
        none, "The chat model of augment FULL_PIPELINE";
    improving.api_key: Hidden, "improving.api_key", "AGORA_IMPROVING_API_KEY", None, none,
        "The chat endpoint's bearer token";
    improving.timeout_ms: Integer, "improving.timeout_ms", "AGORA_IMPROVING_TIMEOUT_MS",
        Some("improving-timeout-ms"), |c| c.improving.timeout_ms.to_string(),
        "Milliseconds one model call may take";
    improving.pulse_round_ms: Integer, "improving.pulse_round_ms",
        "AGORA_IMPROVING_PULSE_ROUND_MS", Some("improving-pulse-round-ms"),
        |c| c.improving.pulse_round_ms.to_string(),
        "Milliseconds of a pulse round (the same on every node of a mesh)";
    payments.wallet_key_file: Text, "payments.wallet_key_file", "AGORA_PAYMENTS_WALLET_KEY_FILE",
        Some("payments-wallet-key-file"), |_| "<data>/wallet.key".to_owned(),
        "The wallet's secp256k1 key file (created at first start; relative to the data directory)";
    payments.challenge_ttl_secs: Integer, "payments.challenge_ttl_secs",
        "AGORA_PAYMENTS_CHALLENGE_TTL_SECS", Some("payments-challenge-ttl-secs"),
        |_| "300".to_owned(), "Seconds a payment challenge stays payable";
    directory.offline_ttl_secs: Integer, "directory.offline_ttl_secs",
        "AGORA_DIRECTORY_OFFLINE_TTL_SECS", Some("directory-offline-ttl-secs"),
        |_| "60".to_owned(),
        "Seconds an agent or tool that left stays listed in the directory as offline";
    log.format: Choice(&["text", "json"]), "log.format", "AGORA_LOG_FORMAT",
        Some("log-format"), |_| "text".to_owned(),
        "Log lines as `text` (colours only on a terminal) or `json` (one object per line)";
}

fn join(addrs: &[Multiaddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn on_off(b: bool) -> String {
    if b { "on" } else { "off" }.to_owned()
}

impl Config {
    /// Overrides read from `AGORA_*` environment variables (the [`SETTINGS`] table); a value
    /// that does not parse is an error naming the variable. An empty number is the same as an
    /// unset one.
    pub fn env_overrides(get: impl Fn(&str) -> Option<String>) -> Result<ConfigPatch, ConfigError> {
        let mut o = ConfigPatch::default();
        for setting in SETTINGS {
            if let Some(value) = get(setting.env) {
                setting.read_env(&mut o, value)?;
            }
        }
        Ok(o)
    }
}

/// A number; empty is unset.
fn number<T: std::str::FromStr>(v: &str, key: &str) -> Result<Option<T>, ConfigError> {
    Some(v)
        .filter(|v| !v.trim().is_empty())
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| invalid(key, &format!("{v:?} is not a number")))
        })
        .transpose()
}

/// On or off: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off`, empty.
fn boolean(v: &str, key: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(invalid(
            key,
            &format!("{v:?} is not one of 1, true, yes, on, 0, false, no, off"),
        )),
    }
}
