//! EIP-712 typed data for payments: the EIP-3009 `TransferWithAuthorization` that the x402
//! "exact" scheme signs, the vouchers of USDC channels, their domains and digests, and
//! secp256k1 signing and address recovery (spec §6.1 "PayCredential: Client signs an EIP-712
//! receipt").
//!
//! Hashing is `alloy-sol-types` (`sol!` structs implement EIP-712's `encodeType`, `hashStruct`
//! and the signing hash `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct)`); addresses and
//! recovery are `alloy-primitives` on `k256`. Signatures are 65 bytes `r ‖ s ‖ v` with `v` 27 or
//! 28 (0 and 1 are read as 27 and 28); a signature with a high `s` (EIP-2) is refused, as
//! Ethereum refuses it, so that no second valid signature can be made from an accepted one.

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{Eip712Domain, SolStruct, sol};

use super::Amount;

sol! {
    /// EIP-3009 `TransferWithAuthorization` (FiatToken v2: USDC), as x402's "exact" EVM scheme
    /// signs it.
    #[derive(Debug, PartialEq, Eq)]
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }

    /// A payment on a USDC channel: the running total the payer owes after payment `nonce`.
    #[derive(Debug, PartialEq, Eq)]
    struct ChannelVoucher {
        bytes32 channelId;
        uint64 nonce;
        uint256 cumulativeAmount;
    }
}

/// The EIP-712 domain name of channel vouchers.
pub const CHANNEL_DOMAIN_NAME: &str = "Agora Payment Channel";
/// Its version.
pub const CHANNEL_DOMAIN_VERSION: &str = "1";

/// Why a signature does not recover.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// Not 65 bytes of hex.
    #[error("a signature is 65 bytes (r, s, v) in hex")]
    Format,
    /// `v` is not 0, 1, 27 or 28.
    #[error("signature v must be 27 or 28")]
    Parity,
    /// `s` in the upper half of the curve order (EIP-2).
    #[error("signature s is not in the lower half of the curve order (EIP-2)")]
    HighS,
    /// No public key recovers from it.
    #[error("the signature does not recover to a public key")]
    Unrecoverable,
}

/// A token's EIP-712 domain: `{name, version, chainId, verifyingContract}`.
pub fn token_domain(name: &str, version: &str, chain_id: u64, contract: Address) -> Eip712Domain {
    Eip712Domain::new(
        Some(name.to_owned().into()),
        Some(version.to_owned().into()),
        Some(U256::from(chain_id)),
        Some(contract),
        None,
    )
}

/// The domain of channel vouchers on chain `chain_id`: `{name: "Agora Payment Channel",
/// version: "1", chainId}` (no contract: channels are settled off chain here).
pub fn channel_domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some(CHANNEL_DOMAIN_NAME.into()),
        Some(CHANNEL_DOMAIN_VERSION.into()),
        Some(U256::from(chain_id)),
        None,
        None,
    )
}

/// The fields of an EIP-3009 authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// Payer.
    pub from: Address,
    /// Payee.
    pub to: Address,
    /// Atomic units.
    pub value: Amount,
    /// Seconds since the epoch after which it is valid.
    pub valid_after: u64,
    /// Seconds since the epoch before which it is valid.
    pub valid_before: u64,
    /// The payer's single-use nonce.
    pub nonce: [u8; 32],
}

impl Authorization {
    /// The `TransferWithAuthorization` struct.
    pub fn typed(&self) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: self.from,
            to: self.to,
            value: U256::from(self.value),
            validAfter: U256::from(self.valid_after),
            validBefore: U256::from(self.valid_before),
            nonce: B256::from(self.nonce),
        }
    }

    /// The EIP-712 signing hash under `domain`.
    pub fn digest(&self, domain: &Eip712Domain) -> B256 {
        self.typed().eip712_signing_hash(domain)
    }
}

/// The signing hash of the voucher `(channel_id, nonce, cumulative)` on chain `chain_id`.
pub fn voucher_digest(
    channel_id: &[u8; 32],
    nonce: u64,
    cumulative: Amount,
    chain_id: u64,
) -> B256 {
    ChannelVoucher {
        channelId: B256::from(*channel_id),
        nonce,
        cumulativeAmount: U256::from(cumulative),
    }
    .eip712_signing_hash(&channel_domain(chain_id))
}

/// The address that signed `digest` with `signature` (65 bytes, `v` 27/28 or 0/1, low `s`).
pub fn recover(digest: &B256, signature: &[u8]) -> Result<Address, SignatureError> {
    let raw: &[u8; 65] = signature.try_into().map_err(|_| SignatureError::Format)?;
    if !matches!(raw[64], 0 | 1 | 27 | 28) {
        return Err(SignatureError::Parity);
    }
    let sig =
        alloy_primitives::Signature::from_raw_array(raw).map_err(|_| SignatureError::Parity)?;
    if sig.normalize_s().is_some() {
        return Err(SignatureError::HighS);
    }
    sig.recover_address_from_prehash(digest)
        .map_err(|_| SignatureError::Unrecoverable)
}

/// Signs `digest` with `key`: 65 bytes `r ‖ s ‖ v`, `v` 27 or 28, low `s` (RFC 6979: the same
/// key and digest always give the same signature).
pub fn sign(key: &k256::ecdsa::SigningKey, digest: &B256) -> Result<[u8; 65], SignatureError> {
    let (sig, recid) = key
        .sign_prehash_recoverable(digest.as_slice())
        .map_err(|_| SignatureError::Unrecoverable)?;
    let mut out = [0u8; 65];
    out[..64].copy_from_slice(&sig.to_bytes());
    out[64] = 27 + recid.to_byte();
    Ok(out)
}

/// The Ethereum address of `key`.
pub fn address_of(key: &k256::ecdsa::SigningKey) -> Address {
    Address::from_private_key(key)
}

/// Parses a `0x` address (any case; a mixed-case one must carry a valid EIP-55 checksum).
pub fn parse_address(s: &str) -> Option<Address> {
    let h = s.strip_prefix("0x")?;
    if h.len() != 40 {
        return None;
    }
    let lower = h.bytes().all(|b| !b.is_ascii_uppercase());
    let upper = h.bytes().all(|b| !b.is_ascii_lowercase());
    if lower || upper {
        let bytes = super::unhex::<20>(h)?;
        return Some(Address::from(bytes));
    }
    Address::parse_checksummed(s, None).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b256(s: &str) -> B256 {
        B256::from(super::super::unhex::<32>(s).unwrap())
    }

    #[test]
    fn the_transfer_with_authorization_type_hash_is_eip_3009s() {
        let t = Authorization {
            from: Address::ZERO,
            to: Address::ZERO,
            value: 0,
            valid_after: 0,
            valid_before: 0,
            nonce: [0; 32],
        }
        .typed();
        assert_eq!(
            t.eip712_type_hash(),
            b256("0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
        );
    }

    #[test]
    fn a_signature_recovers_to_its_signer_and_high_s_is_refused() {
        let key = k256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let digest = voucher_digest(&[1; 32], 1, 3000, 84532);
        let sig = sign(&key, &digest).unwrap();
        assert_eq!(recover(&digest, &sig), Ok(address_of(&key)));
        // the same signature over another voucher recovers to someone else
        let other = voucher_digest(&[1; 32], 1, 3001, 84532);
        assert_ne!(recover(&other, &sig), Ok(address_of(&key)));
        // v as 0/1 is accepted; 29 is not
        let mut v01 = sig;
        v01[64] -= 27;
        assert_eq!(recover(&digest, &v01), Ok(address_of(&key)));
        let mut bad = sig;
        bad[64] = 29;
        assert_eq!(recover(&digest, &bad), Err(SignatureError::Parity));
        // s → n − s with v flipped is the same point, refused (EIP-2)
        let s = U256::from_be_slice(&sig[32..64]);
        let n = U256::from_str_radix(
            "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
            16,
        )
        .unwrap();
        let mut high = sig;
        high[32..64].copy_from_slice(&(n - s).to_be_bytes::<32>());
        high[64] = if sig[64] == 27 { 28 } else { 27 };
        assert_eq!(recover(&digest, &high), Err(SignatureError::HighS));
        assert_eq!(recover(&digest, &sig[..64]), Err(SignatureError::Format));
    }

    #[test]
    fn addresses_parse_with_or_without_checksum() {
        let a = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
        assert!(parse_address(a).is_some());
        assert_eq!(parse_address(&a.to_lowercase()), parse_address(a));
        // one letter's case flipped: a broken checksum
        assert!(parse_address("0x036cbD53842c5426634e7929541eC2318f3dCF7e").is_none());
        assert!(parse_address("036CbD53842c5426634e7929541eC2318f3dCF7e").is_none());
        assert!(parse_address("0x1234").is_none());
    }
}
