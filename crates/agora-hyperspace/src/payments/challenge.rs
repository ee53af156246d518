//! `PayChallenge` (spec §6.1, §6.2 `micropayments.challenge`, §6.3 "402 + X-Payment-Required").
//!
//! A challenge is an x402 v2 `PaymentRequired` (`x402Version`, `error`, `resource`,
//! `accepts[]`) with HAP's fields beside it: `challengeId`, `pricePoints`, `priceUsdc`, `payTo`
//! (the payee's address and PeerId), a fresh 32-byte `nonce` and `expiresAt`. Each entry of
//! `accepts` is an x402 `PaymentRequirements` (both v2's `amount` and v1's
//! `maxAmountRequired`) whose `extra` carries the EIP-712 domain name and version and the
//! `challengeId`: an x402 v2 client copies the entry it pays into its payload's `accepted`, so
//! its credential names the challenge without knowing HAP.

use alloy_primitives::Address;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::assets::{EXACT_SCHEME, POINTS_NETWORK, POINTS_SCHEME, UsdcAsset};
use super::{Amount, hex0x};

/// How long a challenge stays open by default: 5 minutes.
pub const DEFAULT_TTL_MS: u64 = 300_000;

/// A challenge as the node keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Challenge {
    /// `pc-` and 32 hex digits.
    pub challenge_id: String,
    /// What is paid for (a URL path or a method).
    pub resource: String,
    /// Price in points (paid with the points scheme), if points are accepted.
    pub price_points: Option<Amount>,
    /// Price in USDC atomic units (paid with the exact scheme), if USDC is accepted.
    pub price_usdc: Option<Amount>,
    /// Where USDC goes (`0x` address), when `price_usdc` is set.
    pub pay_to_address: Option<String>,
    /// The payee's PeerId (where points go).
    pub pay_to_peer: String,
    /// Accepted USDC chains: (chain id, contract, domain name, domain version).
    pub chains: Vec<(u64, String, String, String)>,
    /// 32 random bytes, `0x` hex.
    pub nonce: String,
    /// Milliseconds since the epoch.
    pub created_at: u64,
    /// Milliseconds since the epoch; a credential after it is refused.
    pub expires_at: u64,
}

impl Challenge {
    /// A new challenge. `random` supplies the id and the nonce; at least one of the prices must
    /// be set (checked by [`super::params`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        random: [u8; 48],
        resource: &str,
        price_points: Option<Amount>,
        price_usdc: Option<Amount>,
        pay_to_address: Option<Address>,
        pay_to_peer: &str,
        chains: &[UsdcAsset],
        now_ms: u64,
        ttl_ms: u64,
    ) -> Self {
        let id = hex::encode(&random[..16]);
        Self {
            challenge_id: format!("pc-{id}"),
            resource: resource.to_owned(),
            price_points,
            price_usdc,
            pay_to_address: pay_to_address.map(|a| a.to_checksum(None)),
            pay_to_peer: pay_to_peer.to_owned(),
            chains: if price_usdc.is_some() {
                chains
                    .iter()
                    .map(|c| {
                        (
                            c.chain_id,
                            c.contract.to_checksum(None),
                            c.name.clone(),
                            c.version.clone(),
                        )
                    })
                    .collect()
            } else {
                Vec::new()
            },
            nonce: hex0x(&random[16..48]),
            created_at: now_ms,
            expires_at: now_ms.saturating_add(ttl_ms),
        }
    }

    /// The accepted USDC chains as assets.
    pub fn usdc_assets(&self) -> Vec<UsdcAsset> {
        self.chains
            .iter()
            .filter_map(|(chain_id, contract, name, version)| {
                Some(UsdcAsset {
                    chain_id: *chain_id,
                    contract: super::eip712::parse_address(contract)?,
                    name: name.clone(),
                    version: version.clone(),
                })
            })
            .collect()
    }

    /// Seconds a payer has, as x402's `maxTimeoutSeconds`.
    fn timeout_s(&self) -> u64 {
        self.expires_at.saturating_sub(self.created_at) / 1000
    }

    /// The wire form (the JSON-RPC result, and base64 in `X-Payment-Required`).
    pub fn to_wire(&self) -> Value {
        let mut accepts = Vec::new();
        if let (Some(price), Some(pay_to)) = (self.price_usdc, &self.pay_to_address) {
            for (chain_id, contract, name, version) in &self.chains {
                accepts.push(json!({
                    "scheme": EXACT_SCHEME,
                    "network": format!("eip155:{chain_id}"),
                    "chainId": chain_id,
                    "amount": price.to_string(),
                    "maxAmountRequired": price.to_string(),
                    "asset": contract,
                    "payTo": pay_to,
                    "resource": self.resource,
                    "mimeType": "application/json",
                    "maxTimeoutSeconds": self.timeout_s(),
                    "extra": {
                        "name": name,
                        "version": version,
                        "challengeId": self.challenge_id,
                    },
                }));
            }
        }
        if let Some(price) = self.price_points {
            accepts.push(json!({
                "scheme": POINTS_SCHEME,
                "network": POINTS_NETWORK,
                "amount": price.to_string(),
                "maxAmountRequired": price.to_string(),
                "asset": "points",
                "payTo": self.pay_to_peer,
                "resource": self.resource,
                "mimeType": "application/json",
                "maxTimeoutSeconds": self.timeout_s(),
                "extra": { "challengeId": self.challenge_id },
            }));
        }
        let mut v = json!({
            "x402Version": 2,
            "challengeId": self.challenge_id,
            "error": "payment required",
            "resource": { "url": self.resource },
            "pricePoints": self.price_points.map(super::amount_json),
            "payTo": { "address": self.pay_to_address, "peerId": self.pay_to_peer },
            "nonce": self.nonce,
            "expiresAt": self.expires_at,
            "accepts": accepts,
        });
        // `priceUsdc` in USDC as the caller gave it (`0.003`), and `priceUsdcAtomic`.
        if let Some(m) = v.as_object_mut() {
            match self.price_usdc {
                Some(p) => super::decimal::put(m, "priceUsdc", p, super::assets::USDC_DECIMALS),
                None => {
                    m.insert("priceUsdc".into(), Value::Null);
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payments::assets::default_usdc;

    #[test]
    fn a_challenge_offers_usdc_per_chain_and_points() {
        let pay_to =
            super::super::eip712::parse_address("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
        let c = Challenge::new(
            [9; 48],
            "/pay/tools/t/invoke",
            Some(10),
            Some(3000),
            pay_to,
            "12D3KooWpeer",
            &default_usdc(),
            1_000,
            DEFAULT_TTL_MS,
        );
        let w = c.to_wire();
        assert_eq!(w["challengeId"], c.challenge_id);
        assert_eq!(w["accepts"].as_array().unwrap().len(), 3);
        assert_eq!(w["accepts"][0]["network"], "eip155:84532");
        assert_eq!(w["accepts"][0]["extra"]["name"], "USDC");
        assert_eq!(w["accepts"][1]["extra"]["name"], "USD Coin");
        assert_eq!(w["accepts"][0]["amount"], "3000");
        assert_eq!(w["accepts"][2]["scheme"], "points");
        assert_eq!(w["accepts"][2]["payTo"], "12D3KooWpeer");
        assert_eq!(w["priceUsdc"], json!(0.003));
        assert_eq!(w["priceUsdcAtomic"], "3000");
        assert_eq!(w["expiresAt"], 301_000);
        assert_eq!(c.usdc_assets(), default_usdc());
        // points only: no USDC entry and no chain kept
        let p = Challenge::new(
            [1; 48],
            "r",
            Some(5),
            None,
            None,
            "p",
            &default_usdc(),
            0,
            1,
        );
        assert!(p.chains.is_empty());
        assert_eq!(p.to_wire()["accepts"].as_array().unwrap().len(), 1);
    }
}
