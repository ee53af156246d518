//! `[log]`: the log filter (`level`; `RUST_LOG` and `AGORA_LOG` come first) and the line
//! format (`format`, `AGORA_LOG_FORMAT`, `--log-format`).

use serde::Deserialize;
use struct_patch::Patch;

use super::{ConfigError, de, invalid};

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
#[derive(Clone, Debug, PartialEq, Eq, Default, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[log]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct LogConfig {
    /// A `tracing` filter (`level`, e.g. `info` or `warn,agora_node=debug`); `RUST_LOG` and
    /// `AGORA_LOG` take precedence. Default `warn,libp2p_kad=error,async_nats=off,agora_node=info`.
    #[patch(skip_wrap)]
    pub level: Option<String>,
    /// `format` (`AGORA_LOG_FORMAT`, `--log-format`): `text` (default) or `json`.
    #[patch(attribute(serde(deserialize_with = "de::log_format")))]
    pub format: LogFormat,
}

impl LogConfig {
    /// Checks each `[log]` setting.
    pub(super) fn settle(&self) -> Result<(), ConfigError> {
        if self.level.as_ref().is_some_and(|l| l.trim().is_empty()) {
            return Err(invalid("log.level", "must not be empty"));
        }
        Ok(())
    }
}
