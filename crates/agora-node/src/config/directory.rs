//! `[directory]`: the directory service (`AGORA_DIRECTORY_*`, `docs/directory.md`).

use serde::Deserialize;
use struct_patch::Patch;

use super::{ConfigError, check};

/// `[directory]` settings (`docs/directory.md`).
#[derive(Clone, Debug, PartialEq, Eq, Default, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[directory]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct DirectoryConfig {
    /// How long an agent or tool that left (disconnected, its server stopped answering) stays
    /// listed as offline before it is gone, seconds (`offline_ttl_secs`,
    /// `AGORA_DIRECTORY_OFFLINE_TTL_SECS`; 1..86,400, default 60). ANS agents leaving Active
    /// and tools of expired capability cards are gone at once.
    #[patch(skip_wrap)]
    pub offline_ttl_secs: Option<u64>,
}

/// `offline_ttl_secs` when not set.
pub const DEFAULT_OFFLINE_TTL_SECS: u64 = 60;

impl DirectoryConfig {
    /// The offline TTL in force, milliseconds.
    #[must_use]
    pub fn offline_ttl_ms(&self) -> u64 {
        self.offline_ttl_secs
            .unwrap_or(DEFAULT_OFFLINE_TTL_SECS)
            .saturating_mul(1000)
    }

    /// Checks each `[directory]` setting.
    pub(super) fn settle(&self) -> Result<(), ConfigError> {
        if let Some(ttl) = self.offline_ttl_secs {
            check(
                "directory.offline_ttl_secs",
                ttl,
                1..=86_400,
                "must be 1..86400",
            )?;
        }
        Ok(())
    }
}
