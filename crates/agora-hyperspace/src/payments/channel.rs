//! Payment channels (spec §6.1 "PayChannel: Persistent stream for per-token micropayments with
//! nonce-based ordering", §6.2 `micropayments.channel.*`, §6.4 "Streaming Channel", §8 −32002).
//!
//! A channel is opened by a payer for a payee (a PeerId) with a budget in one currency (USDC on
//! a chain, or points). Each payment is a **voucher** signed by the payer: the channel id, a
//! nonce one above the last, and the **cumulative** amount owed so far (so a lost voucher is
//! made good by the next, and the payee needs only the last one to be paid everything). USDC
//! vouchers are EIP-712 `ChannelVoucher` signed by the payer's wallet ([`super::eip712`]);
//! points vouchers are signed with the payer's Ed25519 peer key over [`points_voucher_message`].
//!
//! The payee accepts a voucher only if the channel is open, its nonce is exactly the last
//! accepted + 1 (a lower one is a duplicate or a replay, a higher one is out of order: both
//! refused, with the channel's last nonce and total so that an honest payer can resume), its
//! amount is positive, its total stays within the budget (else −32002 with `{remaining,
//! requested, limit}` as spec Example 3), and its signature is the payer's. Closing is sticky:
//! no voucher is accepted after it; `totalSpent` is the last accepted total and `refund` the
//! budget minus it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Amount, hex0x};

/// A channel's currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Currency {
    /// USDC on chain `chain_id` (vouchers signed as EIP-712 with the payer's wallet).
    #[serde(rename_all = "camelCase")]
    Usdc {
        /// EIP-155 chain id.
        chain_id: u64,
    },
    /// Points (vouchers signed with the payer's Ed25519 peer key).
    Points,
}

impl Currency {
    /// As written in `PayChannelState.currency`: `USDC` or `points`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Usdc { .. } => "USDC",
            Self::Points => "points",
        }
    }

    /// Its decimals: the places between a whole unit and an atomic one (USDC 6, points 0).
    pub fn decimals(&self) -> u32 {
        match self {
            Self::Usdc { .. } => super::assets::USDC_DECIMALS,
            Self::Points => 0,
        }
    }
}

/// Open or closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    /// Takes vouchers.
    Open,
    /// Sticky: takes nothing more.
    Closed,
}

/// One side's record of a channel (the payer's node and the payee's node each keep one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Channel {
    /// `0x` and 64 hex digits.
    pub channel_id: String,
    /// The payer: a `0x` address (USDC) or a PeerId (points).
    pub payer: String,
    /// The node that holds the payer's key (PeerId).
    pub payer_peer: String,
    /// The payee node (PeerId).
    pub payee: String,
    /// The currency.
    pub currency: Currency,
    /// Atomic units.
    #[serde(with = "super::amount_serde")]
    pub budget: Amount,
    /// Total of the accepted vouchers.
    #[serde(with = "super::amount_serde")]
    pub spent: Amount,
    /// Nonce of the last accepted voucher (0: none yet).
    pub nonce: u64,
    /// Open or closed.
    pub status: Status,
    /// Milliseconds since the epoch.
    pub opened_at: u64,
    /// When it was closed.
    pub closed_at: Option<u64>,
    /// The last accepted voucher's signature, hex (what a settler would redeem).
    pub last_signature: Option<String>,
}

/// Why a payment or a voucher is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// −32002: the total would exceed the budget.
    #[error(
        "Budget Exceeded: paying {requested} would exceed the channel's budget ({remaining} of {limit} left)"
    )]
    BudgetExceeded {
        /// Left in the channel.
        remaining: Amount,
        /// The payment asked.
        requested: Amount,
        /// The budget.
        limit: Amount,
    },
    /// The channel is closed.
    #[error("the channel is closed")]
    Closed,
    /// A nonce at or below the last accepted one: a duplicate or a replayed voucher.
    #[error("voucher nonce {got} was already used (the last accepted is {last})")]
    Duplicate {
        /// The voucher's nonce.
        got: u64,
        /// The last accepted.
        last: u64,
    },
    /// A nonce beyond the next one.
    #[error("voucher nonce {got} is out of order (the next is {next})")]
    OutOfOrder {
        /// The voucher's nonce.
        got: u64,
        /// The one expected.
        next: u64,
    },
    /// The voucher's total is not above the last one.
    #[error("a payment must be of a positive amount")]
    NotPositive,
    /// The voucher is not the payer's.
    #[error("the voucher is not signed by the channel's payer")]
    Signature,
}

impl ChannelError {
    /// The stable `data.reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::BudgetExceeded { .. } => "budget-exceeded",
            Self::Closed => "channel-closed",
            Self::Duplicate { .. } => "duplicate-nonce",
            Self::OutOfOrder { .. } => "out-of-order-nonce",
            Self::NotPositive => "not-positive",
            Self::Signature => "invalid-signature",
        }
    }
}

/// A voucher as it travels from the payer's node to the payee's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Voucher {
    /// The channel.
    pub channel_id: String,
    /// Last accepted + 1.
    pub nonce: u64,
    /// Running total after this payment (atomic units, string of digits on the wire).
    #[serde(with = "super::amount_serde")]
    pub cumulative: Amount,
    /// This payment alone.
    #[serde(with = "super::amount_serde")]
    pub amount: Amount,
    /// The payer's note (at most [`super::params::MAX_MEMO`] characters).
    #[serde(default)]
    pub memo: String,
    /// `0x` hex: 65 bytes (USDC) or 64 (points).
    pub signature: String,
}

/// The channel id: SHA-256 of `agora/channel/1`, payer, payer node, payee, currency and 16
/// random bytes, NUL-separated.
pub fn channel_id(
    payer: &str,
    payer_peer: &str,
    payee: &str,
    currency: &Currency,
    salt: [u8; 16],
) -> String {
    let currency = match currency {
        Currency::Usdc { chain_id } => format!("usdc:{chain_id}"),
        Currency::Points => "points".to_owned(),
    };
    let mut h = Sha256::new();
    for part in [
        b"agora/channel/1".as_slice(),
        payer.as_bytes(),
        payer_peer.as_bytes(),
        payee.as_bytes(),
        currency.as_bytes(),
        &salt,
    ] {
        h.update(part);
        h.update([0u8]);
    }
    hex0x(&h.finalize())
}

/// The bytes a points payer signs for a voucher: `agora/points-voucher/1`, the channel id, the
/// nonce and the cumulative amount, NUL-separated.
pub fn points_voucher_message(channel_id: &str, nonce: u64, cumulative: Amount) -> Vec<u8> {
    format!("agora/points-voucher/1\0{channel_id}\0{nonce}\0{cumulative}").into_bytes()
}

impl Channel {
    /// A new open channel.
    pub fn open(
        payer: &str,
        payer_peer: &str,
        payee: &str,
        currency: Currency,
        budget: Amount,
        salt: [u8; 16],
        now_ms: u64,
    ) -> Self {
        Self {
            channel_id: channel_id(payer, payer_peer, payee, &currency, salt),
            payer: payer.to_owned(),
            payer_peer: payer_peer.to_owned(),
            payee: payee.to_owned(),
            currency,
            budget,
            spent: 0,
            nonce: 0,
            status: Status::Open,
            opened_at: now_ms,
            closed_at: None,
            last_signature: None,
        }
    }

    /// Left to spend.
    pub fn remaining(&self) -> Amount {
        self.budget.saturating_sub(self.spent)
    }

    /// The payer's side: the (nonce, cumulative) of a payment of `amount`, checked against the
    /// budget; nothing changes until [`Channel::accept`].
    pub fn next(&self, amount: Amount) -> Result<(u64, Amount), ChannelError> {
        if self.status == Status::Closed {
            return Err(ChannelError::Closed);
        }
        if amount == 0 {
            return Err(ChannelError::NotPositive);
        }
        let total = self.spent.checked_add(amount);
        match total {
            Some(t) if t <= self.budget => Ok((self.nonce + 1, t)),
            _ => Err(ChannelError::BudgetExceeded {
                remaining: self.remaining(),
                requested: amount,
                limit: self.budget,
            }),
        }
    }

    /// Checks `v` against the channel's state (not its signature: [`Channel::signed_bytes`]
    /// and the node's key lookup do that) and, when it passes, records it.
    pub fn accept(&mut self, v: &Voucher) -> Result<(), ChannelError> {
        if self.status == Status::Closed {
            return Err(ChannelError::Closed);
        }
        if v.nonce <= self.nonce {
            return Err(ChannelError::Duplicate {
                got: v.nonce,
                last: self.nonce,
            });
        }
        if v.nonce != self.nonce + 1 {
            return Err(ChannelError::OutOfOrder {
                got: v.nonce,
                next: self.nonce + 1,
            });
        }
        if v.cumulative <= self.spent || v.cumulative - self.spent != v.amount {
            return Err(ChannelError::NotPositive);
        }
        if v.cumulative > self.budget {
            return Err(ChannelError::BudgetExceeded {
                remaining: self.remaining(),
                requested: v.amount,
                limit: self.budget,
            });
        }
        self.nonce = v.nonce;
        self.spent = v.cumulative;
        self.last_signature = Some(v.signature.clone());
        Ok(())
    }

    /// Closes the channel (sticky): `(totalSpent, refund)`.
    pub fn close(&mut self, now_ms: u64) -> (Amount, Amount) {
        if self.status == Status::Open {
            self.status = Status::Closed;
            self.closed_at = Some(now_ms);
        }
        (self.spent, self.remaining())
    }

    /// The digest or message the payer signs for voucher `(nonce, cumulative)`: the EIP-712
    /// signing hash (USDC) or [`points_voucher_message`] (points).
    pub fn signed_bytes(&self, nonce: u64, cumulative: Amount) -> Option<Vec<u8>> {
        match self.currency {
            Currency::Usdc { chain_id } => Some(
                super::eip712::voucher_digest(&self.id_bytes()?, nonce, cumulative, chain_id)
                    .to_vec(),
            ),
            Currency::Points => Some(points_voucher_message(&self.channel_id, nonce, cumulative)),
        }
    }

    /// `v`'s signature is the payer's: its wallet address recovers from the EIP-712 voucher
    /// (USDC), or its peer key (`peer_key` of the payer PeerId) verifies the points voucher.
    pub fn check_signature(
        &self,
        v: &Voucher,
        peer_key: impl Fn(&str) -> Option<[u8; 32]>,
    ) -> Result<(), ChannelError> {
        if v.channel_id != self.channel_id {
            return Err(ChannelError::Signature);
        }
        let bytes = self
            .signed_bytes(v.nonce, v.cumulative)
            .ok_or(ChannelError::Signature)?;
        match self.currency {
            Currency::Usdc { .. } => {
                let sig = super::unhex::<65>(&v.signature).ok_or(ChannelError::Signature)?;
                let digest = alloy_primitives::B256::from_slice(&bytes);
                let signer =
                    super::eip712::recover(&digest, &sig).map_err(|_| ChannelError::Signature)?;
                if super::eip712::parse_address(&self.payer) == Some(signer) {
                    Ok(())
                } else {
                    Err(ChannelError::Signature)
                }
            }
            Currency::Points => {
                let sig = super::unhex::<64>(&v.signature).ok_or(ChannelError::Signature)?;
                let key = peer_key(&self.payer).ok_or(ChannelError::Signature)?;
                let vk = ed25519_dalek::VerifyingKey::from_bytes(&key)
                    .map_err(|_| ChannelError::Signature)?;
                vk.verify_strict(&bytes, &ed25519_dalek::Signature::from_bytes(&sig))
                    .map_err(|_| ChannelError::Signature)
            }
        }
    }

    /// The channel id's 32 bytes.
    pub fn id_bytes(&self) -> Option<[u8; 32]> {
        super::unhex::<32>(&self.channel_id)
    }

    /// `PayChannelState` on the wire: `budget`, `spent` and `remaining` as decimals of the
    /// currency, each with its `…Atomic` twin.
    pub fn to_wire(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "channelId": self.channel_id,
            "payer": self.payer,
            "payerPeerId": self.payer_peer,
            "payee": self.payee,
            "currency": self.currency.label(),
            "chainId": match self.currency { Currency::Usdc { chain_id } => Some(chain_id), Currency::Points => None },
            "nonce": self.nonce,
            "state": match self.status { Status::Open => "open", Status::Closed => "closed" },
            "openedAt": self.opened_at,
            "closedAt": self.closed_at,
        });
        if let Some(m) = v.as_object_mut() {
            let d = self.currency.decimals();
            super::decimal::put(m, "budget", self.budget, d);
            super::decimal::put(m, "spent", self.spent, d);
            super::decimal::put(m, "remaining", self.remaining(), d);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voucher(ch: &Channel, nonce: u64, amount: Amount) -> Voucher {
        Voucher {
            channel_id: ch.channel_id.clone(),
            nonce,
            cumulative: ch.spent + amount,
            amount,
            memo: String::new(),
            signature: "0x00".into(),
        }
    }

    #[test]
    fn the_spec_example_budget_and_refund_are_exact() {
        // §6.4: budget 5.0 USDC, two payments of 0.003 → spent 0.006, refund 4.994
        let mut ch = Channel::open(
            "0xpayer",
            "peerA",
            "peerB",
            Currency::Usdc { chain_id: 84532 },
            5_000_000,
            [1; 16],
            0,
        );
        for n in 1..=2 {
            let (nonce, total) = ch.next(3000).unwrap();
            assert_eq!(nonce, n);
            let mut v = voucher(&ch, nonce, 3000);
            v.cumulative = total;
            ch.accept(&v).unwrap();
        }
        assert_eq!(ch.close(9), (6000, 4_994_000));
        assert_eq!(ch.to_wire()["state"], "closed");
        assert_eq!(ch.accept(&voucher(&ch, 3, 1)), Err(ChannelError::Closed));
        assert_eq!(ch.next(1), Err(ChannelError::Closed));
        // closing again changes nothing
        assert_eq!(ch.close(10), (6000, 4_994_000));
        assert_eq!(ch.closed_at, Some(9));
    }

    #[test]
    fn duplicates_gaps_overdrafts_and_zero_are_refused() {
        let mut ch = Channel::open("p", "pp", "q", Currency::Points, 100, [2; 16], 0);
        ch.accept(&voucher(&ch, 1, 40)).unwrap();
        let replay = Voucher {
            cumulative: 40,
            ..voucher(&ch, 1, 40)
        };
        assert_eq!(
            ch.accept(&replay),
            Err(ChannelError::Duplicate { got: 1, last: 1 })
        );
        assert_eq!(
            ch.accept(&voucher(&ch, 3, 10)),
            Err(ChannelError::OutOfOrder { got: 3, next: 2 })
        );
        assert_eq!(
            ch.accept(&voucher(&ch, 2, 0)),
            Err(ChannelError::NotPositive)
        );
        let over = ch.accept(&voucher(&ch, 2, 61));
        assert_eq!(
            over,
            Err(ChannelError::BudgetExceeded {
                remaining: 60,
                requested: 61,
                limit: 100
            })
        );
        assert_eq!(over.unwrap_err().reason(), "budget-exceeded");
        assert_eq!(
            ch.next(61),
            Err(ChannelError::BudgetExceeded {
                remaining: 60,
                requested: 61,
                limit: 100
            })
        );
        // a voucher whose amount and total disagree
        let mut lying = voucher(&ch, 2, 10);
        lying.amount = 5;
        assert_eq!(ch.accept(&lying), Err(ChannelError::NotPositive));
        ch.accept(&voucher(&ch, 2, 60)).unwrap();
        assert_eq!((ch.nonce, ch.spent, ch.remaining()), (2, 100, 0));
    }

    #[test]
    fn usdc_and_points_vouchers_are_checked_against_the_payer() {
        use ed25519_dalek::Signer as _;
        let wallet = k256::ecdsa::SigningKey::from_slice(&[5u8; 32]).unwrap();
        let payer = super::super::eip712::address_of(&wallet).to_checksum(None);
        let ch = Channel::open(
            &payer,
            "pp",
            "q",
            Currency::Usdc { chain_id: 84532 },
            10,
            [3; 16],
            0,
        );
        let digest = ch.signed_bytes(1, 4).unwrap();
        let sig = super::super::eip712::sign(&wallet, &alloy_primitives::B256::from_slice(&digest))
            .unwrap();
        let mut v = voucher(&ch, 1, 4);
        v.signature = hex0x(&sig);
        assert_eq!(ch.check_signature(&v, |_| None), Ok(()));
        v.cumulative = 5;
        assert_eq!(
            ch.check_signature(&v, |_| None),
            Err(ChannelError::Signature)
        );

        let key = ed25519_dalek::SigningKey::from_bytes(&[6u8; 32]);
        let pk = key.verifying_key().to_bytes();
        let pid = crate::peer_id_of(&pk);
        let ch = Channel::open(&pid, &pid, "q", Currency::Points, 10, [4; 16], 0);
        let mut v = voucher(&ch, 1, 4);
        v.signature = hex0x(&key.sign(&ch.signed_bytes(1, 4).unwrap()).to_bytes());
        let lookup = |p: &str| crate::peer_id::public_key_of(p);
        assert_eq!(ch.check_signature(&v, lookup), Ok(()));
        v.nonce = 2;
        assert_eq!(ch.check_signature(&v, lookup), Err(ChannelError::Signature));
    }

    #[test]
    fn channel_ids_depend_on_every_part() {
        let a = channel_id("p", "pp", "q", &Currency::Points, [0; 16]);
        assert_eq!(a.len(), 66);
        assert_ne!(a, channel_id("p", "pp", "q", &Currency::Points, [1; 16]));
        assert_ne!(
            a,
            channel_id("p", "pp", "q", &Currency::Usdc { chain_id: 1 }, [0; 16])
        );
        assert_ne!(a, channel_id("p", "pp", "r", &Currency::Points, [0; 16]));
    }

    #[test]
    fn vouchers_round_trip_with_string_amounts() {
        let v = Voucher {
            channel_id: "0x01".into(),
            nonce: 7,
            cumulative: 1 << 70,
            amount: 3,
            memo: "42 tokens".into(),
            signature: "0xab".into(),
        };
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["cumulative"], (1u128 << 70).to_string());
        assert_eq!(serde_json::from_value::<Voucher>(j).unwrap(), v);
        let bad = serde_json::json!({"channelId": "x", "nonce": 1, "cumulative": 1.5, "amount": "1", "signature": ""});
        assert!(serde_json::from_value::<Voucher>(bad).is_err());
    }
}
