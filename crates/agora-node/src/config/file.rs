//! Reading `agora.toml` into a layer ([`ConfigPatch`], by serde: unknown keys are refused, and a
//! refused value names its key and line), its relative paths taken from the file's directory;
//! and [`toml_keys`], every key the file accepts.

use std::path::Path;

use super::{Config, ConfigError, ConfigPatch, de};

impl Config {
    /// Applies the contents of a TOML file: a layer whose relative paths (`[agtp]`,
    /// `[agh.nats]`, `[bridge] a2a_keys`) are taken from the file's directory.
    pub fn apply_file(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let mut layer: ConfigPatch = de::parse(text, path)?;
        let base = path.parent().unwrap_or_else(|| Path::new(""));
        layer.agtp.rebase(base);
        layer.agh.nats.rebase(base);
        layer.bridge.rebase(base);
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
        let message = toml::from_str::<ConfigPatch>(&text).err()?.to_string();
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
