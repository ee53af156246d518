//! `PayCredential` (spec §6.1 "Client signs an EIP-712 receipt and retries with X-Payment
//! header", §6.2 `micropayments.verify`), its checks, and receipts.
//!
//! A credential is an x402 `PaymentPayload`, v1 (`scheme` and `network` at the top) or v2
//! (`accepted` holding the requirements paid), given as a JSON object or as base64 of one:
//! `{"x402Version", "scheme", "network", "challengeId"?, "accepted"?, "payload": {"signature",
//! "authorization": {"from", "to", "value", "validAfter", "validBefore", "nonce"}}}`. The
//! challenge it answers is its `challengeId`, else `accepted.extra.challengeId`.
//!
//! Schemes: `exact` (EIP-3009 `TransferWithAuthorization` signed as EIP-712 typed data under the
//! USDC domain of the chain; `from`/`to` addresses) and `points` (the same authorization fields
//! with PeerIds for `from`/`to`, signed with the payer's Ed25519 peer key over
//! [`points_message`]).
//!
//! [`check`] runs every check that needs no state: the credential answers the challenge, the
//! scheme and network are offered, `to` is the payee, `value` ≥ the price, `validAfter ≤ now <
//! validBefore` (seconds), the signature is `from`'s. A signature that is not `from`'s under the
//! challenge's domain is tried under the other USDC domain names and chain ids, so that the
//! refusal can say which one the payer used (`wrong-domain-name`, `wrong-chain-id`). What needs
//! state (the challenge exists and is unused, the nonce was never used) is the node's.

use alloy_primitives::Address;
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::assets::{EXACT_SCHEME, POINTS_NETWORK, POINTS_SCHEME, UsdcAsset, chain_id_of};
use super::challenge::Challenge;
use super::eip712::{self, Authorization, parse_address};
use super::{Amount, hex0x, parse_amount, unhex};

/// Largest credential accepted (JSON or base64 of it).
pub const MAX_CREDENTIAL_BYTES: usize = 8 * 1024;

/// Why a credential is refused; [`Refusal::reason`] is the `data.reason` of the refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a credential.
    #[error("malformed credential: {0}")]
    Malformed(String),
    /// It names no challenge, or one this node never made.
    #[error("the credential answers no challenge of this node")]
    UnknownChallenge,
    /// It names another challenge than the one it must answer.
    #[error("the credential answers another challenge")]
    ChallengeMismatch,
    /// The challenge expired.
    #[error("the challenge expired")]
    ChallengeExpired,
    /// The challenge was already paid.
    #[error("the challenge was already paid")]
    ChallengeUsed,
    /// The scheme is not offered.
    #[error("scheme {0:?} is not offered")]
    Scheme(String),
    /// The network (chain) is not offered.
    #[error("network {0:?} is not accepted")]
    Network(String),
    /// The asset is not the accepted chain's token.
    #[error("asset {0} is not the accepted token")]
    Asset(String),
    /// `to` is not the payee.
    #[error("the payment goes to {0}, not to the payee")]
    Recipient(String),
    /// `value` is below the price.
    #[error("value {value} is below the price {price}")]
    Amount {
        /// Paid.
        value: Amount,
        /// Asked.
        price: Amount,
    },
    /// `now < validAfter`.
    #[error("not valid before {0} (seconds since the epoch)")]
    NotYetValid(u64),
    /// `now ≥ validBefore`.
    #[error("expired at {0} (seconds since the epoch)")]
    Expired(u64),
    /// The signature is not `from`'s.
    #[error("the signature is not {0}'s")]
    Signature(String),
    /// The signature is `from`'s under another domain name of the same chain.
    #[error("signed under EIP-712 domain name {used:?}; this chain's token is {expected:?}")]
    WrongDomainName {
        /// The name that recovers to `from`.
        used: String,
        /// The accepted name.
        expected: String,
    },
    /// The signature is `from`'s under another chain id.
    #[error("signed for chain id {used}; the credential's network is chain {expected}")]
    WrongChainId {
        /// The chain id that recovers to `from`.
        used: u64,
        /// The accepted chain id.
        expected: u64,
    },
    /// `(from, nonce)` was used before.
    #[error("authorization nonce already used by this payer")]
    Replayed,
}

impl Refusal {
    /// The stable `data.reason` string.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::UnknownChallenge => "unknown-challenge",
            Self::ChallengeMismatch => "challenge-mismatch",
            Self::ChallengeExpired => "challenge-expired",
            Self::ChallengeUsed => "challenge-used",
            Self::Scheme(_) => "unsupported-scheme",
            Self::Network(_) => "wrong-network",
            Self::Asset(_) => "wrong-asset",
            Self::Recipient(_) => "wrong-payee",
            Self::Amount { .. } => "insufficient-amount",
            Self::NotYetValid(_) => "not-yet-valid",
            Self::Expired(_) => "expired",
            Self::Signature(_) => "invalid-signature",
            Self::WrongDomainName { .. } => "wrong-domain-name",
            Self::WrongChainId { .. } => "wrong-chain-id",
            Self::Replayed => "replayed",
        }
    }
}

/// What a credential authorises: addresses (`exact`) or PeerIds (`points`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payer {
    /// An EIP-3009 authorization.
    Evm(Authorization),
    /// A points authorization.
    Points(PointsAuthorization),
}

/// A points payment: the fields of an EIP-3009 authorization with PeerIds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointsAuthorization {
    /// Payer's PeerId.
    pub from: String,
    /// Payee's PeerId.
    pub to: String,
    /// Points.
    pub value: Amount,
    /// Seconds.
    pub valid_after: u64,
    /// Seconds.
    pub valid_before: u64,
    /// Single-use per payer.
    pub nonce: [u8; 32],
}

/// The bytes a points payer signs with its Ed25519 peer key: the domain
/// `agora/points-payment/1`, then the fields, NUL-separated, numbers in decimal, the nonce in
/// `0x` hex.
pub fn points_message(a: &PointsAuthorization) -> Vec<u8> {
    format!(
        "agora/points-payment/1\0{}\0{}\0{}\0{}\0{}\0{}",
        a.from,
        a.to,
        a.value,
        a.valid_after,
        a.valid_before,
        hex0x(&a.nonce)
    )
    .into_bytes()
}

/// A decoded credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// 1 or 2.
    pub x402_version: u64,
    /// `exact` or `points`.
    pub scheme: String,
    /// CAIP-2 or x402 v1 network name, or `hyperspace:points`.
    pub network: String,
    /// The challenge it answers, when it names one.
    pub challenge_id: Option<String>,
    /// The asset of `accepted`, when given.
    pub asset: Option<String>,
    /// The authorization.
    pub payer: Payer,
    /// 65 bytes (`exact`) or 64 bytes (`points`).
    pub signature: Vec<u8>,
}

fn malformed(m: impl Into<String>) -> Refusal {
    Refusal::Malformed(m.into())
}

fn seconds(field: &'static str, v: &Value) -> Result<u64, Refusal> {
    let n = parse_amount(field, v).map_err(|e| malformed(e.to_string()))?;
    u64::try_from(n).map_err(|_| malformed(format!("{field} is too large")))
}

fn text<'a>(v: &'a Value, field: &str) -> Result<&'a str, Refusal> {
    v.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| malformed(format!("{field} is missing or not a string")))
}

impl Credential {
    /// Decodes a credential given as a JSON object or as a string of base64 (standard or
    /// URL-safe, padded or not) of one.
    pub fn decode(v: &Value) -> Result<Self, Refusal> {
        match v {
            Value::String(s) => Self::decode_base64(s),
            Value::Object(_) => Self::from_json(v),
            _ => Err(malformed("a credential is an object or base64 of one")),
        }
    }

    /// Decodes base64 of a JSON credential (an `X-Payment` header's value).
    pub fn decode_base64(s: &str) -> Result<Self, Refusal> {
        if s.len() > MAX_CREDENTIAL_BYTES {
            return Err(malformed(format!(
                "larger than {MAX_CREDENTIAL_BYTES} bytes"
            )));
        }
        let s = s.trim();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(s))
            .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(s))
            .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s))
            .map_err(|_| malformed("not base64"))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| malformed(e.to_string()))?;
        Self::from_json(&v)
    }

    /// Reads the JSON form.
    pub fn from_json(v: &Value) -> Result<Self, Refusal> {
        if serde_json::to_vec(v).map_or(usize::MAX, |b| b.len()) > MAX_CREDENTIAL_BYTES {
            return Err(malformed(format!(
                "larger than {MAX_CREDENTIAL_BYTES} bytes"
            )));
        }
        let x402_version = v.get("x402Version").and_then(Value::as_u64).unwrap_or(1);
        let accepted = v.get("accepted").filter(|a| a.is_object());
        let field = |name: &str| -> Option<&str> {
            v.get(name)
                .and_then(Value::as_str)
                .or_else(|| accepted.and_then(|a| a.get(name)).and_then(Value::as_str))
        };
        let scheme = field("scheme")
            .ok_or_else(|| malformed("scheme is missing"))?
            .to_owned();
        let network = field("network")
            .ok_or_else(|| malformed("network is missing"))?
            .to_owned();
        let challenge_id = v
            .get("challengeId")
            .and_then(Value::as_str)
            .or_else(|| {
                accepted
                    .and_then(|a| a.pointer("/extra/challengeId"))
                    .and_then(Value::as_str)
            })
            .map(str::to_owned);
        let asset = accepted
            .and_then(|a| a.get("asset"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let payload = v
            .get("payload")
            .filter(|p| p.is_object())
            .ok_or_else(|| malformed("payload is missing"))?;
        let auth = payload
            .get("authorization")
            .filter(|a| a.is_object())
            .ok_or_else(|| malformed("payload.authorization is missing"))?;
        let sig_text = text(payload, "signature")?;
        let value = parse_amount("value", auth.get("value").unwrap_or(&Value::Null))
            .map_err(|e| malformed(e.to_string()))?;
        let valid_after = seconds("validAfter", auth.get("validAfter").unwrap_or(&Value::Null))?;
        let valid_before = seconds(
            "validBefore",
            auth.get("validBefore").unwrap_or(&Value::Null),
        )?;
        let nonce =
            unhex::<32>(text(auth, "nonce")?).ok_or_else(|| malformed("nonce is not 32 bytes"))?;
        let (payer, signature) = match scheme.as_str() {
            POINTS_SCHEME => {
                let sig = unhex::<64>(sig_text)
                    .ok_or_else(|| malformed("a points signature is 64 bytes of hex"))?;
                (
                    Payer::Points(PointsAuthorization {
                        from: text(auth, "from")?.to_owned(),
                        to: text(auth, "to")?.to_owned(),
                        value,
                        valid_after,
                        valid_before,
                        nonce,
                    }),
                    sig.to_vec(),
                )
            }
            _ => {
                let sig = unhex::<65>(sig_text)
                    .ok_or_else(|| malformed("the signature is not 65 bytes of hex"))?;
                let address = |f: &str| {
                    text(auth, f).and_then(|s| {
                        parse_address(s).ok_or_else(|| malformed(format!("{f} is not an address")))
                    })
                };
                (
                    Payer::Evm(Authorization {
                        from: address("from")?,
                        to: address("to")?,
                        value,
                        valid_after,
                        valid_before,
                        nonce,
                    }),
                    sig.to_vec(),
                )
            }
        };
        Ok(Self {
            x402_version,
            scheme,
            network,
            challenge_id,
            asset,
            payer,
            signature,
        })
    }

    /// The payer as written on receipts (`0x` checksummed address or PeerId).
    pub fn payer_id(&self) -> String {
        match &self.payer {
            Payer::Evm(a) => a.from.to_checksum(None),
            Payer::Points(p) => p.from.clone(),
        }
    }

    /// The authorization's nonce.
    pub fn nonce(&self) -> [u8; 32] {
        match &self.payer {
            Payer::Evm(a) => a.nonce,
            Payer::Points(p) => p.nonce,
        }
    }

    /// The authorization's value.
    pub fn value(&self) -> Amount {
        match &self.payer {
            Payer::Evm(a) => a.value,
            Payer::Points(p) => p.value,
        }
    }

    /// The receipt id of this credential: `rcpt-` and the first 32 hex digits of SHA-256 of its
    /// signature.
    pub fn receipt_id(&self) -> String {
        let h = Sha256::digest(&self.signature);
        format!("rcpt-{}", hex::encode(&h[..16]))
    }

    /// The JSON form (what settlement records carry, so that any node can check the payer's
    /// signature).
    pub fn to_json(&self) -> Value {
        let auth = match &self.payer {
            Payer::Evm(a) => json!({
                "from": a.from.to_checksum(None),
                "to": a.to.to_checksum(None),
                "value": a.value.to_string(),
                "validAfter": a.valid_after.to_string(),
                "validBefore": a.valid_before.to_string(),
                "nonce": hex0x(&a.nonce),
            }),
            Payer::Points(p) => json!({
                "from": p.from,
                "to": p.to,
                "value": p.value.to_string(),
                "validAfter": p.valid_after.to_string(),
                "validBefore": p.valid_before.to_string(),
                "nonce": hex0x(&p.nonce),
            }),
        };
        json!({
            "x402Version": self.x402_version,
            "scheme": self.scheme,
            "network": self.network,
            "challengeId": self.challenge_id,
            "payload": { "signature": hex0x(&self.signature), "authorization": auth },
        })
    }
}

/// A credential that passed [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Who paid.
    pub payer: String,
    /// Paid to.
    pub pay_to: String,
    /// What was paid (the authorization's value).
    pub amount: Amount,
    /// `exact` or `points`.
    pub scheme: String,
    /// CAIP-2 network or `hyperspace:points`.
    pub network: String,
    /// The token contract, or `points`.
    pub asset: String,
}

/// Checks `cred` against `challenge` at `now_ms` (everything but the state: whether the
/// challenge is still unpaid and the nonce unused). `peer_key` gives the Ed25519 public key of
/// a PeerId (for points).
pub fn check(
    cred: &Credential,
    challenge: &Challenge,
    now_ms: u64,
    peer_key: impl Fn(&str) -> Option<[u8; 32]>,
) -> Result<Verified, Refusal> {
    if let Some(id) = &cred.challenge_id
        && *id != challenge.challenge_id
    {
        return Err(Refusal::ChallengeMismatch);
    }
    if now_ms >= challenge.expires_at {
        return Err(Refusal::ChallengeExpired);
    }
    let now_s = now_ms / 1000;
    let window = |after: u64, before: u64| {
        if now_s < after {
            Err(Refusal::NotYetValid(after))
        } else if now_s >= before {
            Err(Refusal::Expired(before))
        } else {
            Ok(())
        }
    };
    match (&cred.payer, cred.scheme.as_str()) {
        (Payer::Evm(auth), EXACT_SCHEME) => {
            let (Some(price), Some(pay_to)) = (challenge.price_usdc, &challenge.pay_to_address)
            else {
                return Err(Refusal::Scheme(cred.scheme.clone()));
            };
            let chain =
                chain_id_of(&cred.network).ok_or_else(|| Refusal::Network(cred.network.clone()))?;
            let assets = challenge.usdc_assets();
            let asset = assets
                .iter()
                .find(|a| a.chain_id == chain)
                .ok_or_else(|| Refusal::Network(cred.network.clone()))?;
            if let Some(named) = &cred.asset
                && parse_address(named) != Some(asset.contract)
            {
                return Err(Refusal::Asset(named.clone()));
            }
            if parse_address(pay_to) != Some(auth.to) {
                return Err(Refusal::Recipient(auth.to.to_checksum(None)));
            }
            if auth.value < price {
                return Err(Refusal::Amount {
                    value: auth.value,
                    price,
                });
            }
            window(auth.valid_after, auth.valid_before)?;
            check_evm_signature(auth, &cred.signature, asset)?;
            Ok(Verified {
                payer: auth.from.to_checksum(None),
                pay_to: pay_to.clone(),
                amount: auth.value,
                scheme: EXACT_SCHEME.to_owned(),
                network: asset.network(),
                asset: asset.contract.to_checksum(None),
            })
        }
        (Payer::Points(p), POINTS_SCHEME) => {
            let Some(price) = challenge.price_points else {
                return Err(Refusal::Scheme(cred.scheme.clone()));
            };
            if cred.network != POINTS_NETWORK {
                return Err(Refusal::Network(cred.network.clone()));
            }
            if p.to != challenge.pay_to_peer {
                return Err(Refusal::Recipient(p.to.clone()));
            }
            if p.value < price {
                return Err(Refusal::Amount {
                    value: p.value,
                    price,
                });
            }
            window(p.valid_after, p.valid_before)?;
            check_points_signature(p, &cred.signature, peer_key)?;
            Ok(Verified {
                payer: p.from.clone(),
                pay_to: p.to.clone(),
                amount: p.value,
                scheme: POINTS_SCHEME.to_owned(),
                network: POINTS_NETWORK.to_owned(),
                asset: "points".to_owned(),
            })
        }
        _ => Err(Refusal::Scheme(cred.scheme.clone())),
    }
}

/// Chain ids tried when diagnosing a signature made for another chain: the well-known USDC
/// chains.
const DIAGNOSE_CHAINS: [u64; 10] = [
    1, 8453, 84532, 137, 42161, 421_614, 10, 11_155_111, 43114, 143,
];

/// `signature` is `auth.from`'s under `asset`'s domain; else the refusal names the domain name
/// or chain id the payer did sign under, when one of the usual ones recovers to `from`.
pub fn check_evm_signature(
    auth: &Authorization,
    signature: &[u8],
    asset: &UsdcAsset,
) -> Result<(), Refusal> {
    let signed_by = |domain: &alloy_sol_types::Eip712Domain| -> Option<Address> {
        eip712::recover(&auth.digest(domain), signature).ok()
    };
    if signed_by(&asset.domain()) == Some(auth.from) {
        return Ok(());
    }
    for name in ["USDC", "USD Coin", "USD Coin (PoS)", "Bridged USDC"] {
        if name == asset.name {
            continue;
        }
        let d = eip712::token_domain(name, &asset.version, asset.chain_id, asset.contract);
        if signed_by(&d) == Some(auth.from) {
            return Err(Refusal::WrongDomainName {
                used: name.to_owned(),
                expected: asset.name.clone(),
            });
        }
    }
    for chain in DIAGNOSE_CHAINS {
        if chain == asset.chain_id {
            continue;
        }
        for name in ["USDC", "USD Coin"] {
            let d = eip712::token_domain(name, &asset.version, chain, asset.contract);
            if signed_by(&d) == Some(auth.from) {
                return Err(Refusal::WrongChainId {
                    used: chain,
                    expected: asset.chain_id,
                });
            }
        }
    }
    Err(Refusal::Signature(auth.from.to_checksum(None)))
}

/// `signature` is the Ed25519 signature of `p.from`'s peer key over [`points_message`].
pub fn check_points_signature(
    p: &PointsAuthorization,
    signature: &[u8],
    peer_key: impl Fn(&str) -> Option<[u8; 32]>,
) -> Result<(), Refusal> {
    let bad = || Refusal::Signature(p.from.clone());
    let key = peer_key(&p.from).ok_or_else(bad)?;
    let vk = ed25519_dalek::VerifyingKey::from_bytes(&key).map_err(|_| bad())?;
    let sig: &[u8; 64] = signature.try_into().map_err(|_| bad())?;
    vk.verify_strict(
        &points_message(p),
        &ed25519_dalek::Signature::from_bytes(sig),
    )
    .map_err(|_| bad())
}

/// A receipt: what an accepted credential becomes (durable before `verify` answers).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// `rcpt-` and 32 hex digits ([`Credential::receipt_id`]).
    pub receipt_id: String,
    /// The challenge it paid.
    pub challenge_id: String,
    /// What was paid for.
    pub resource: String,
    /// `exact` or `points`.
    pub scheme: String,
    /// CAIP-2 network or `hyperspace:points`.
    pub network: String,
    /// Token contract or `points`.
    pub asset: String,
    /// Payer address or PeerId.
    pub payer: String,
    /// Payee address or PeerId.
    pub pay_to: String,
    /// Atomic units, as a string of digits.
    pub amount: String,
    /// The authorization nonce, `0x` hex.
    pub nonce: String,
    /// Milliseconds since the epoch.
    pub accepted_at: u64,
    /// Whether a settler has settled it (always false with the no-chain settler).
    pub settled: bool,
    /// The credential, so that anyone can check the payer's signature.
    pub credential: Value,
}

impl Receipt {
    /// The receipt of `cred`, verified as `v`, for `challenge`, at `now_ms`.
    pub fn new(cred: &Credential, v: &Verified, challenge: &Challenge, now_ms: u64) -> Self {
        Self {
            receipt_id: cred.receipt_id(),
            challenge_id: challenge.challenge_id.clone(),
            resource: challenge.resource.clone(),
            scheme: v.scheme.clone(),
            network: v.network.clone(),
            asset: v.asset.clone(),
            payer: v.payer.clone(),
            pay_to: v.pay_to.clone(),
            amount: v.amount.to_string(),
            nonce: hex0x(&cred.nonce()),
            accepted_at: now_ms,
            settled: false,
            credential: cred.to_json(),
        }
    }

    /// The x402 `SettleResponse`-shaped body of `X-Payment-Response` (base64 of this JSON):
    /// `transaction` is empty, as no chain transaction was made (`settled: false`).
    pub fn payment_response(&self) -> Value {
        json!({
            "success": true,
            "transaction": "",
            "network": self.network,
            "payer": self.payer,
            "amount": self.amount,
            "receiptId": self.receipt_id,
            "challengeId": self.challenge_id,
            "settled": self.settled,
        })
    }
}
