//! `[log]`: the log filter (`level`; `RUST_LOG` and `AGORA_LOG` come first) and the line
//! format (`format`, `AGORA_LOG_FORMAT`, `--log-format`).

use serde::Deserialize;

use super::{ConfigError, Overrides, invalid};

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

impl LogConfig {
    /// Applies the `[log]` settings of one layer.
    pub(super) fn apply(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        if let Some(l) = &o.log.level {
            if l.trim().is_empty() {
                return Err(invalid("log.level", "must not be empty"));
            }
            self.level = Some(l.clone());
        }
        if let Some(f) = &o.log.format {
            self.format = f.parse().map_err(|e: String| invalid("log.format", &e))?;
        }
        Ok(())
    }
}

/// `[log]` in one layer of settings (see [`Overrides`]).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogOverrides {
    /// `level`.
    pub level: Option<String>,
    /// `format`.
    pub format: Option<String>,
}
