//! `[payments]`: the payments service's wallet and challenges (`AGORA_PAYMENTS_*`).

use std::path::PathBuf;

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
