//! `[agh]` and `[agh.nats]`: AGH settings and the NATS bridge (`AGORA_AGH_*`,
//! `AGORA_AGH_NATS_*`).

use std::path::{Path, PathBuf};

use async_nats::ServerAddr;
use serde::Deserialize;
use struct_patch::Patch;

use super::{ConfigError, check, de, invalid};

/// `[agh]` settings.
#[derive(Clone, Debug, PartialEq, Eq, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[agh]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct AghConfig {
    /// Replay age in seconds (`replay_age`).
    pub replay_age: i64,
    /// Apply the AGH runtime's own admission rules (`reference_admission`).
    pub reference_admission: bool,
    /// The NATS bridge (`[agh.nats]`), on once any of its settings is given (see
    /// [`AghConfig::nats`]).
    #[patch(nesting)]
    pub nats: NatsConfig,
    /// Channels one agent connection may be in (`max_channels`, `AGORA_AGH_MAX_CHANNELS`).
    pub max_channels: usize,
}

/// Default of `[agh] max_channels`.
pub const DEFAULT_MAX_CHANNELS: usize = 64;

impl Default for AghConfig {
    fn default() -> Self {
        Self {
            replay_age: agora_agh::validate::DEFAULT_REPLAY_AGE,
            reference_admission: false,
            nats: NatsConfig::default(),
            max_channels: DEFAULT_MAX_CHANNELS,
        }
    }
}

impl AghConfig {
    /// Checks each `[agh]` setting; a NATS `url` becomes the one server.
    pub(super) fn settle(&mut self) -> Result<(), ConfigError> {
        check(
            "agh.replay_age",
            self.replay_age,
            1..,
            "must be a positive number of seconds",
        )?;
        check(
            "agh.max_channels",
            self.max_channels,
            1..=100_000,
            "must be 1 to 100000",
        )?;
        if let Some(url) = self.nats.url.take() {
            if !self.nats.servers.is_empty() {
                return Err(invalid("agh.nats.url", "set url or servers, not both"));
            }
            self.nats.servers = vec![url];
        }
        Ok(())
    }

    /// The NATS bridge's settings, when any is given.
    pub fn nats(&self) -> Option<&NatsConfig> {
        Some(&self.nats).filter(|n| **n != NatsConfig::default())
    }
}

/// `[agh.nats]` settings: the servers of one NATS cluster, at most one authentication method,
/// TLS, as the NATS face (`faces/nats.rs`) uses them. Secrets are files in `agora.toml`
/// (`password_file`, `token_file`) and values in the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[agh.nats]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct NatsConfig {
    /// `url`: one server, the same as `servers = [url]` (moved there once applied).
    #[patch(skip_wrap)]
    pub url: Option<String>,
    /// Server URLs (`servers`, `AGORA_AGH_NATS_URL` comma-separated), e.g.
    /// `nats://127.0.0.1:4222`; several for a cluster.
    pub servers: Vec<String>,
    /// `user` (`AGORA_AGH_NATS_USER`), with `password`.
    #[patch(skip_wrap)]
    pub user: Option<String>,
    /// `password_file` or `AGORA_AGH_NATS_PASSWORD`.
    #[patch(skip_wrap)]
    #[patch(attribute(serde(rename = "password_file", deserialize_with = "de::secret_file")))]
    pub password: Option<Secret>,
    /// `token_file` or `AGORA_AGH_NATS_TOKEN`.
    #[patch(skip_wrap)]
    #[patch(attribute(serde(rename = "token_file", deserialize_with = "de::secret_file")))]
    pub token: Option<Secret>,
    /// `nkey_seed_file` (`AGORA_AGH_NATS_NKEY_SEED_FILE`): a user NKey seed (`SU…`).
    #[patch(skip_wrap)]
    pub nkey_seed_file: Option<PathBuf>,
    /// `creds_file` (`AGORA_AGH_NATS_CREDS_FILE`): a user JWT and NKey seed.
    #[patch(skip_wrap)]
    pub creds_file: Option<PathBuf>,
    /// `tls_required` (`AGORA_AGH_NATS_TLS_REQUIRED`): refuse a connection without TLS.
    pub tls_required: bool,
    /// `ca_file` (`AGORA_AGH_NATS_CA_FILE`): PEM roots to trust instead of the Mozilla roots.
    #[patch(skip_wrap)]
    pub ca_file: Option<PathBuf>,
    /// `cert_file` (`AGORA_AGH_NATS_CERT_FILE`): client certificate chain (PEM), with `key_file`.
    #[patch(skip_wrap)]
    pub cert_file: Option<PathBuf>,
    /// `key_file` (`AGORA_AGH_NATS_KEY_FILE`): the client certificate's private key (PEM).
    #[patch(skip_wrap)]
    pub key_file: Option<PathBuf>,
}

impl NatsConfigPatch {
    /// Takes relative paths from `base` (the directory of the file the layer comes from).
    pub(super) fn rebase(&mut self, base: &Path) {
        let rel = |p: &mut Option<PathBuf>| {
            if let Some(p) = p.as_mut().filter(|p| p.is_relative()) {
                *p = base.join(&*p);
            }
        };
        for path in [
            &mut self.nkey_seed_file,
            &mut self.creds_file,
            &mut self.ca_file,
            &mut self.cert_file,
            &mut self.key_file,
        ] {
            rel(path);
        }
        for secret in [&mut self.password, &mut self.token] {
            if let Some(Secret::File(p)) = secret
                && p.is_relative()
            {
                *p = base.join(&*p);
            }
        }
    }
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
