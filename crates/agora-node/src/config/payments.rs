//! `[payments]`: the payments service's wallet and challenges (`AGORA_PAYMENTS_*`).

use std::path::PathBuf;

use serde::Deserialize;
use struct_patch::Patch;

use super::{ConfigError, check, invalid};

/// `[payments]` settings (`docs/node.md` "Micropayments").
#[derive(Clone, Debug, PartialEq, Eq, Default, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[payments]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct PaymentsConfig {
    /// The wallet's secp256k1 key file (`wallet_key_file`, `AGORA_PAYMENTS_WALLET_KEY_FILE`;
    /// default `<data>/wallet.key`, created at first start; a relative path is taken from the
    /// data directory).
    #[patch(skip_wrap)]
    pub wallet_key_file: Option<PathBuf>,
    /// How long a payment challenge stays payable, seconds (`challenge_ttl_secs`,
    /// `AGORA_PAYMENTS_CHALLENGE_TTL_SECS`; 10..86,400, default 300).
    #[patch(skip_wrap)]
    pub challenge_ttl_secs: Option<u64>,
}

impl PaymentsConfig {
    /// Checks each `[payments]` setting.
    pub(super) fn settle(&self) -> Result<(), ConfigError> {
        if self
            .wallet_key_file
            .as_ref()
            .is_some_and(|f| f.as_os_str().is_empty())
        {
            return Err(invalid("payments.wallet_key_file", "must not be empty"));
        }
        if let Some(ttl) = self.challenge_ttl_secs {
            check(
                "payments.challenge_ttl_secs",
                ttl,
                10..=86_400,
                "must be 10..86400",
            )?;
        }
        Ok(())
    }
}
