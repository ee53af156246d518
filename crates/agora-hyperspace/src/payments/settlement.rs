//! Settlement gossip (spec §2.1 `hyperspace/settlements/{round}` "Payment receipt gossip").
//!
//! A round is a fixed window of [`ROUND_MS`] (90 s) of the payee's clock: round `r` is
//! `[r·90 s, (r+1)·90 s)` since the epoch. When a node accepts a payment (a credential) or
//! closes a channel it is the payee of, it publishes a [`Record`] in a signed v2 envelope on the
//! topic of the round of the acceptance. The record carries the payer's own signature (the
//! credential, or the channel's last voucher), so every node checks that the payer signed what
//! the record says ([`Record::check`]) before keeping it; the envelope's signature says which
//! node published it. Nothing here moves money on a chain: see the settler in the node.

use serde::{Deserialize, Serialize};

use super::assets::{EXACT_SCHEME, POINTS_SCHEME, UsdcAsset};
use super::channel::{Channel, Status, Voucher};
use super::credential::{Credential, Payer, check_evm_signature, check_points_signature};
use super::eip712::parse_address;
use super::{Amount, parse_amount};

/// The prefix of the settlement topics.
pub const SETTLEMENTS_PREFIX: &str = "hyperspace/settlements/";

/// A settlement round's length: 90 seconds.
pub const ROUND_MS: u64 = 90_000;

/// The round of time `now_ms`.
pub fn round_of(now_ms: u64) -> u64 {
    now_ms / ROUND_MS
}

/// The topic of round `round`.
pub fn topic(round: u64) -> String {
    format!("{SETTLEMENTS_PREFIX}{round}")
}

/// What was settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Record {
    /// An accepted credential.
    #[serde(rename_all = "camelCase")]
    Payment {
        /// `rcpt-…`.
        receipt_id: String,
        /// The payee node's time of acceptance (ms).
        at: u64,
        /// Atomic units (string of digits).
        amount: String,
        /// USDC's EIP-712 domain (`exact`): chain id, contract, name, version.
        domain: Option<(u64, String, String, String)>,
        /// The credential as accepted.
        credential: serde_json::Value,
    },
    /// A closed channel.
    #[serde(rename_all = "camelCase")]
    ChannelClose {
        /// The channel (payee's record, after the close).
        channel: Channel,
        /// The last accepted voucher (absent when nothing was paid).
        voucher: Option<Voucher>,
        /// The payee node's time of the close (ms).
        at: u64,
    },
}

/// Why a record is not kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// It does not decode or its parts disagree.
    #[error("malformed settlement record: {0}")]
    Malformed(String),
    /// The payer's signature does not hold.
    #[error("the payer's signature does not hold: {0}")]
    Signature(String),
}

impl Record {
    /// An id that names what was settled (receipt id, or channel id with `:close`).
    pub fn id(&self) -> String {
        match self {
            Self::Payment { receipt_id, .. } => receipt_id.clone(),
            Self::ChannelClose { channel, .. } => format!("{}:close", channel.channel_id),
        }
    }

    /// The acceptance time (ms).
    pub fn at(&self) -> u64 {
        match self {
            Self::Payment { at, .. } | Self::ChannelClose { at, .. } => *at,
        }
    }

    /// Checks that the payer signed what the record says.
    pub fn check(&self, peer_key: impl Fn(&str) -> Option<[u8; 32]>) -> Result<(), RecordError> {
        let bad = |m: &str| RecordError::Malformed(m.to_owned());
        match self {
            Self::Payment {
                receipt_id,
                amount,
                domain,
                credential,
                ..
            } => {
                let cred = Credential::from_json(credential)
                    .map_err(|e| RecordError::Malformed(e.to_string()))?;
                if cred.receipt_id() != *receipt_id {
                    return Err(bad("receipt id is not the credential's"));
                }
                let amount: Amount =
                    parse_amount("amount", &serde_json::Value::String(amount.clone()))
                        .map_err(|e| RecordError::Malformed(e.to_string()))?;
                if amount != cred.value() {
                    return Err(bad("amount is not the credential's"));
                }
                match (&cred.payer, cred.scheme.as_str()) {
                    (Payer::Evm(auth), EXACT_SCHEME) => {
                        let (chain_id, contract, name, version) = domain
                            .as_ref()
                            .ok_or_else(|| bad("an exact payment names its domain"))?;
                        let asset = UsdcAsset {
                            chain_id: *chain_id,
                            contract: parse_address(contract)
                                .ok_or_else(|| bad("domain contract"))?,
                            name: name.clone(),
                            version: version.clone(),
                        };
                        check_evm_signature(auth, &cred.signature, &asset)
                            .map_err(|e| RecordError::Signature(e.to_string()))
                    }
                    (Payer::Points(p), POINTS_SCHEME) => {
                        check_points_signature(p, &cred.signature, peer_key)
                            .map_err(|e| RecordError::Signature(e.to_string()))
                    }
                    _ => Err(bad("unknown scheme")),
                }
            }
            Self::ChannelClose {
                channel, voucher, ..
            } => {
                if channel.status != Status::Closed {
                    return Err(bad("the channel is not closed"));
                }
                match voucher {
                    None if channel.spent == 0 && channel.nonce == 0 => Ok(()),
                    None => Err(bad("a channel that was paid names its last voucher")),
                    Some(v) => {
                        if v.nonce != channel.nonce || v.cumulative != channel.spent {
                            return Err(bad("the voucher is not the channel's last"));
                        }
                        if channel.spent > channel.budget {
                            return Err(bad("spent beyond the budget"));
                        }
                        channel
                            .check_signature(v, peer_key)
                            .map_err(|e| RecordError::Signature(e.to_string()))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_and_topics() {
        assert_eq!(round_of(0), 0);
        assert_eq!(round_of(89_999), 0);
        assert_eq!(round_of(90_000), 1);
        assert_eq!(topic(7), "hyperspace/settlements/7");
    }
}
