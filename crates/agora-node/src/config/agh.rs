//! `[agh]` and `[agh.nats]`: AGH settings and the NATS bridge (`AGORA_AGH_*`,
//! `AGORA_AGH_NATS_*`).

use std::path::{Path, PathBuf};

use async_nats::ServerAddr;
use serde::{Deserialize, Deserializer};

use super::{Config, ConfigError, invalid, set_in_range};

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

/// `[agh.nats]` settings: the servers of one NATS cluster, at most one authentication method,
/// TLS, as the NATS face (`faces/nats.rs`) uses them.
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
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.servers.is_empty() {
            return Err(invalid(
                "agh.nats",
                "no server: set url or servers (or AGORA_AGH_NATS_URL)",
            ));
        }
        for url in &self.servers {
            nats_server_addr(url)
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

/// `[agh.nats]` in one layer of settings: a file's `[agh.nats]` (which replaces the section
/// whole; secrets are files, `password_file` and `token_file`) or the `AGORA_AGH_NATS_*`
/// variables and their flags (merged key by key; secrets are values).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsOverrides {
    /// `url`: one server (`servers` for several).
    pub url: Option<String>,
    /// `servers`; `AGORA_AGH_NATS_URL` (comma-separated).
    pub servers: Option<Vec<String>>,
    /// `user`, `AGORA_AGH_NATS_USER`.
    pub user: Option<String>,
    /// `password_file`, or `AGORA_AGH_NATS_PASSWORD`.
    #[serde(rename = "password_file", deserialize_with = "secret_file")]
    pub password: Option<Secret>,
    /// `token_file`, or `AGORA_AGH_NATS_TOKEN`.
    #[serde(rename = "token_file", deserialize_with = "secret_file")]
    pub token: Option<Secret>,
    /// `nkey_seed_file`, `AGORA_AGH_NATS_NKEY_SEED_FILE`.
    pub nkey_seed_file: Option<PathBuf>,
    /// `creds_file`, `AGORA_AGH_NATS_CREDS_FILE`.
    pub creds_file: Option<PathBuf>,
    /// `tls_required`, `AGORA_AGH_NATS_TLS_REQUIRED`.
    pub tls_required: Option<bool>,
    /// `ca_file`, `AGORA_AGH_NATS_CA_FILE`.
    pub ca_file: Option<PathBuf>,
    /// `cert_file`, `AGORA_AGH_NATS_CERT_FILE`.
    pub cert_file: Option<PathBuf>,
    /// `key_file`, `AGORA_AGH_NATS_KEY_FILE`.
    pub key_file: Option<PathBuf>,
}

/// A secret's file, as `agora.toml` names it.
fn secret_file<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
    Ok(Option::<PathBuf>::deserialize(d)?.map(Secret::File))
}

impl NatsOverrides {
    pub(super) fn is_empty(&self) -> bool {
        self.url.is_none()
            && self.servers.is_none()
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

    pub(super) fn apply_to(self, n: &mut NatsConfig) {
        // (`url` is a file's key only, and a file replaces the section whole)
        if let Some(servers) = self.servers {
            n.servers = servers;
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

/// Parses one server URL: `nats://host[:port]`, `tls://host[:port]` (TLS required) or
/// `host[:port]`; the port defaults to 4222. Credentials in the URL are refused: they belong
/// in a secret file or the environment, not in a URL that may be shown.
pub fn nats_server_addr(url: &str) -> Result<ServerAddr, String> {
    let addr: ServerAddr = url.trim().parse().map_err(|e| format!("{e}"))?;
    if addr.has_user_pass() {
        return Err(
            "credentials in the URL are not accepted: use [agh.nats] user and password_file \
             (or AGORA_AGH_NATS_USER / AGORA_AGH_NATS_PASSWORD), or token_file"
                .into(),
        );
    }
    if addr.is_websocket() {
        return Err("WebSocket URLs are not supported: use nats:// or tls://".into());
    }
    Ok(addr)
}

/// `[agh]` in one layer of settings (see [`Overrides`](super::Overrides)).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AghOverrides {
    /// `replay_age`.
    pub replay_age: Option<i64>,
    /// `reference_admission`.
    pub reference_admission: Option<bool>,
    /// `max_channels`.
    pub max_channels: Option<usize>,
    /// `nats`.
    pub nats: Option<NatsOverrides>,
}

impl NatsOverrides {
    /// A file's section as a whole; relative paths are taken from `base` (the file's
    /// directory).
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
        let secret = |s: Option<Secret>| match s {
            Some(Secret::File(p)) => rel(Some(p)).map(Secret::File),
            other => other,
        };
        Ok(NatsConfig {
            servers,
            user: self.user,
            password: secret(self.password),
            token: secret(self.token),
            nkey_seed_file: rel(self.nkey_seed_file),
            creds_file: rel(self.creds_file),
            tls_required: self.tls_required.unwrap_or(false),
            ca_file: rel(self.ca_file),
            cert_file: rel(self.cert_file),
            key_file: rel(self.key_file),
        })
    }
}

impl Config {
    /// Applies the `[agh]` settings of one layer but `max_channels` (with the faces' limits)
    /// and the environment's NATS settings (merged by [`Config::apply`]); a file's
    /// `[agh.nats]` replaces the section, its relative paths taken from `base`.
    pub(super) fn apply_agh(&mut self, agh: AghOverrides, base: &Path) -> Result<(), ConfigError> {
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
            self.agh.nats = Some(nats.into_config(base)?);
        }
        Ok(())
    }
}
