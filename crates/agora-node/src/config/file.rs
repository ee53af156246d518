//! The shape of `agora.toml`: every section's keys as options, read into [`Overrides`] (the
//! sections with paths, `[agtp]` and `[agh.nats]`, are applied apart: their relative paths are
//! taken from the file's directory).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{
    Config, ConfigError, NatsConfig, NatsOverrides, Overrides, Secret, invalid, set_in_range,
};

/// The shape of `agora.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    pub(super) data: Option<PathBuf>,
    pub(super) p2p_listen: Option<OneOrMany>,
    pub(super) agh_listen: Option<String>,
    pub(super) http_listen: Option<String>,
    pub(super) rpc_listen: Option<String>,
    pub(super) agtp_listen: Option<String>,
    pub(super) bootstrap: Option<OneOrMany>,
    pub(super) peers_low: Option<usize>,
    pub(super) peers_high: Option<usize>,
    pub(super) greet_interval: Option<u64>,
    pub(super) api_key: Option<String>,
    pub(super) max_connections: Option<usize>,
    pub(super) header_timeout: Option<u64>,
    pub(super) request_timeout: Option<u64>,
    pub(super) ws_idle_timeout: Option<u64>,
    pub(super) allowed_origins: Option<OneOrMany>,
    pub(super) allowed_hosts: Option<OneOrMany>,
    pub(super) public_reads: Option<bool>,
    pub(super) agh: Option<FileAgh>,
    pub(super) rpc: Option<FileRpc>,
    pub(super) agtp: Option<FileAgtp>,
    pub(super) memory: Option<FileMemory>,
    pub(super) learning: Option<FileLearning>,
    pub(super) improving: Option<FileImproving>,
    pub(super) payments: Option<FilePayments>,
    pub(super) log: Option<FileLog>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLog {
    pub(super) level: Option<String>,
    pub(super) format: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FilePayments {
    pub(super) wallet_key_file: Option<PathBuf>,
    pub(super) challenge_ttl_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileImproving {
    pub(super) share: Option<bool>,
    pub(super) task_types: Option<OneOrMany>,
    pub(super) max_library: Option<usize>,
    pub(super) max_task_types: Option<usize>,
    pub(super) min_reward: Option<f64>,
    pub(super) base_url: Option<String>,
    pub(super) model: Option<String>,
    pub(super) api_key: Option<String>,
    pub(super) timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLearning {
    pub(super) reflector: Option<String>,
    pub(super) base_url: Option<String>,
    pub(super) model: Option<String>,
    pub(super) api_key: Option<String>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) max_playbooks: Option<usize>,
    pub(super) max_bullets: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMemory {
    pub(super) serve: Option<bool>,
    pub(super) embedder: Option<String>,
    pub(super) base_url: Option<String>,
    pub(super) model: Option<String>,
    pub(super) api_key: Option<String>,
    pub(super) workers: Option<usize>,
    pub(super) max_memories: Option<usize>,
    pub(super) peer_rate: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAgtp {
    pub(super) name: Option<String>,
    pub(super) tls: Option<bool>,
    pub(super) insecure: Option<bool>,
    pub(super) cert: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
    pub(super) tls_names: Option<Vec<String>>,
    pub(super) scope_violation_code: Option<u16>,
    pub(super) weights: Option<FileWeights>,
    pub(super) rate: Option<f64>,
    pub(super) burst: Option<f64>,
    /// Seconds.
    pub(super) refresh_interval: Option<u64>,
    /// Seconds.
    pub(super) refresh_retry: Option<u64>,
    /// Milliseconds.
    pub(super) refresh_timeout_ms: Option<u64>,
    pub(super) governance_keys: Option<Vec<PathBuf>>,
    pub(super) peers: Option<Vec<FilePeer>>,
    /// Milliseconds.
    pub(super) federation_deadline_ms: Option<u64>,
    /// `asserted` or `refused`.
    pub(super) unregistered_scope_claims: Option<String>,
    pub(super) population_open: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileWeights {
    pub(super) trust_tier: f64,
    pub(super) behavioral_trust: f64,
    pub(super) capability_match: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FilePeer {
    pub(super) name: String,
    pub(super) endpoint: String,
    pub(super) key: PathBuf,
    pub(super) ca: Option<PathBuf>,
    pub(super) tls: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRpc {
    pub(super) api_key: Option<String>,
    pub(super) conn_rate: Option<f64>,
    pub(super) key_rate: Option<f64>,
    pub(super) conn_frames: Option<usize>,
    pub(super) conn_bytes: Option<usize>,
    pub(super) total_bytes: Option<usize>,
    pub(super) write_timeout_secs: Option<u64>,
    pub(super) guard_workers: Option<usize>,
    pub(super) guard_budget_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAgh {
    pub(super) replay_age: Option<i64>,
    pub(super) reference_admission: Option<bool>,
    pub(super) max_channels: Option<usize>,
    pub(super) nats: Option<FileNats>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileNats {
    pub(super) url: Option<String>,
    pub(super) servers: Option<Vec<String>>,
    pub(super) user: Option<String>,
    pub(super) password_file: Option<PathBuf>,
    pub(super) token_file: Option<PathBuf>,
    pub(super) nkey_seed_file: Option<PathBuf>,
    pub(super) creds_file: Option<PathBuf>,
    pub(super) tls_required: Option<bool>,
    pub(super) ca_file: Option<PathBuf>,
    pub(super) cert_file: Option<PathBuf>,
    pub(super) key_file: Option<PathBuf>,
}

impl FileNats {
    /// The section as a whole; relative paths are taken from `base` (the file's directory).
    pub(super) fn into_config(self, base: &Path) -> Result<NatsConfig, ConfigError> {
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
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(super) fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

impl Config {
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
            set_in_range(
                &mut self.agh.replay_age,
                "agh.replay_age",
                agh.replay_age,
                1..,
                "must be a positive number of seconds",
            )?;
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
}

/// Every key `agora.toml` accepts, as serde reads them (`section.key`; `agtp.peers[].key` for
/// the tables of `[[agtp.peers]]`): each table is given a key it refuses, and its error names
/// the keys it takes. The settings list (`docs/settings.txt`) is checked against it.
pub fn toml_keys() -> Vec<String> {
    const PROBE: &str = "__probe";
    // The keys of the table that `header` (`[…]` or `[[…]]`, or nothing) opens.
    let keys_of = |header: &str| -> Option<Vec<String>> {
        let text = format!("{header}\n{PROBE} = 0\n");
        let message = toml::from_str::<File>(&text).err()?.to_string();
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
