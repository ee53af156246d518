//! `[payments]`: the payments service's wallet and challenges (`AGORA_PAYMENTS_*`).

use serde::Deserialize;

use std::path::PathBuf;

use super::{ConfigError, Overrides, invalid, set_in_range};

/// `[payments]` settings (`docs/node.md` "Micropayments").
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PaymentsConfig {
    /// The wallet's secp256k1 key file (`wallet_key_file`, `AGORA_PAYMENTS_WALLET_KEY_FILE`;
    /// default `<data>/wallet.key`, created at first start; a relative path is taken from the
    /// data directory).
    pub wallet_key_file: Option<PathBuf>,
    /// How long a payment challenge stays payable, seconds (`challenge_ttl_secs`,
    /// `AGORA_PAYMENTS_CHALLENGE_TTL_SECS`; 10..86,400, default 300).
    pub challenge_ttl_secs: Option<u64>,
}

impl PaymentsConfig {
    /// Applies the `[payments]` settings of one layer.
    pub(super) fn apply(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        if let Some(f) = &o.payments.wallet_key_file {
            if f.as_os_str().is_empty() {
                return Err(invalid("payments.wallet_key_file", "must not be empty"));
            }
            self.wallet_key_file = Some(f.clone());
        }
        set_in_range(
            &mut self.challenge_ttl_secs,
            "payments.challenge_ttl_secs",
            o.payments.challenge_ttl_secs,
            10..=86_400,
            "must be 10..86400",
        )
    }
}

/// `[payments]` in one layer of settings (see [`Overrides`]).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaymentsOverrides {
    /// `wallet_key_file`.
    pub wallet_key_file: Option<PathBuf>,
    /// `challenge_ttl_secs`.
    pub challenge_ttl_secs: Option<u64>,
}
