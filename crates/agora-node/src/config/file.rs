//! [`Overrides`]: one layer of settings in the shape of `agora.toml` (each section's part is
//! declared in its section's file: `MemoryOverrides` in `memory.rs`, …), read from the file by
//! serde; and [`toml_keys`], every key the file accepts.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use super::{
    AghOverrides, AgtpOverrides, Config, ConfigError, ImprovingOverrides, LearningOverrides,
    LogOverrides, MemoryOverrides, NatsOverrides, PaymentsOverrides, RpcOverrides,
};

/// One layer of settings, in the shape of `agora.toml`: the file is read into it (unknown keys
/// are refused), and the environment and the flags fill it through [`SETTINGS`](super::SETTINGS).
/// `None` (or an empty list) leaves the layer below.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Overrides {
    /// `data`.
    pub data: Option<PathBuf>,
    /// `p2p_listen` (a string or a list).
    #[serde(deserialize_with = "one_or_many")]
    pub p2p_listen: Vec<String>,
    /// `agh_listen`.
    pub agh_listen: Option<String>,
    /// `http_listen`.
    pub http_listen: Option<String>,
    /// `rpc_listen`.
    pub rpc_listen: Option<String>,
    /// `agtp_listen`.
    pub agtp_listen: Option<String>,
    /// `bootstrap` (a string or a list).
    #[serde(deserialize_with = "one_or_many")]
    pub bootstrap: Vec<String>,
    /// `peers_low`.
    pub peers_low: Option<usize>,
    /// `peers_high`.
    pub peers_high: Option<usize>,
    /// `greet_interval`, seconds.
    pub greet_interval: Option<u64>,
    /// `api_key`.
    pub api_key: Option<String>,
    /// `max_connections`.
    pub max_connections: Option<usize>,
    /// `header_timeout`, seconds.
    pub header_timeout: Option<u64>,
    /// `request_timeout`, seconds.
    pub request_timeout: Option<u64>,
    /// `ws_idle_timeout`, seconds.
    pub ws_idle_timeout: Option<u64>,
    /// `allowed_origins` (a string or a list).
    #[serde(deserialize_with = "one_or_many")]
    pub allowed_origins: Vec<String>,
    /// `allowed_hosts` (a string or a list).
    #[serde(deserialize_with = "one_or_many")]
    pub allowed_hosts: Vec<String>,
    /// `public_reads`.
    pub public_reads: Option<bool>,
    /// `[agh]`.
    pub agh: AghOverrides,
    /// `[rpc]`.
    pub rpc: RpcOverrides,
    /// `[agtp]`.
    pub agtp: AgtpOverrides,
    /// `[memory]`.
    pub memory: MemoryOverrides,
    /// `[learning]`.
    pub learning: LearningOverrides,
    /// `[improving]`.
    pub improving: ImprovingOverrides,
    /// `[payments]`.
    pub payments: PaymentsOverrides,
    /// `[log]`.
    pub log: LogOverrides,
    /// `AGORA_AGH_NATS_*` and their flags: merged into `[agh.nats]` key by key (a file's
    /// `[agh.nats]`, in `agh.nats`, replaces the section whole).
    #[serde(skip)]
    pub nats: NatsOverrides,
    /// The directory relative paths are taken from (a file layer's: the file's directory).
    #[serde(skip)]
    pub base: Option<PathBuf>,
}

/// A string or a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// Reads a string or a list of strings as a list.
pub(super) fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

impl Config {
    /// Applies the contents of a TOML file: a layer whose relative paths (`[agtp]`,
    /// `[agh.nats]`) are taken from the file's directory.
    pub fn apply_file(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let mut layer: Overrides = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        layer.base = Some(path.parent().unwrap_or_else(|| Path::new("")).to_path_buf());
        self.apply(layer)
    }
}

/// Every key `agora.toml` accepts, as serde reads them (`section.key`; `agtp.peers[].key` for
/// the tables of `[[agtp.peers]]`): each table is given a key it refuses, and its error names
/// the keys it takes. The settings list (`docs/settings.txt`) is checked against it.
pub fn toml_keys() -> Vec<String> {
    const PROBE: &str = "__probe";
    // The keys of the table that `header` (`[…]` or `[[…]]`, or nothing) opens.
    let keys_of = |header: &str| -> Option<Vec<String>> {
        let text = format!("{header}\n{PROBE} = 0\n");
        let message = toml::from_str::<Overrides>(&text).err()?.to_string();
        let (_, expected) = message.split_once(&format!("unknown field `{PROBE}`"))?;
        Some(
            expected
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect(),
        )
    };
    let mut keys = Vec::new();
    let mut tables = vec![(String::new(), String::new())];
    while let Some((header, prefix)) = tables.pop() {
        for key in keys_of(&header).unwrap_or_default() {
            let path = format!("{prefix}{key}");
            if keys_of(&format!("[{path}]")).is_some() {
                tables.push((format!("[{path}]"), format!("{path}.")));
            } else if keys_of(&format!("[[{path}]]")).is_some() {
                tables.push((format!("[[{path}]]"), format!("{path}[].")));
            } else {
                keys.push(path);
            }
        }
    }
    keys.sort();
    keys
}
