//! libp2p PeerIds of Ed25519 keys, without libp2p.
//!
//! A PeerId of an Ed25519 key is the identity multihash (code 0x00, length 36) of the key's
//! protobuf encoding (`08 01 12 20` followed by the 32 key bytes), written in base58btc: the
//! familiar `12D3KooW…` strings (base58 by the `bs58` crate). Envelope v2's `from` must equal
//! the PeerId of its `pk`.

/// The PeerId (`12D3KooW…`) of a raw Ed25519 public key.
pub fn peer_id_of(public_key: &[u8; 32]) -> String {
    let mut bytes = Vec::with_capacity(38);
    bytes.extend_from_slice(&[0x00, 0x24, 0x08, 0x01, 0x12, 0x20]);
    bytes.extend_from_slice(public_key);
    base58_encode(&bytes)
}

/// Base58btc encoding (the `bs58` crate, Bitcoin alphabet).
pub fn base58_encode(input: &[u8]) -> String {
    bs58::encode(input).into_string()
}

/// Base58btc decoding; `None` on a character outside the alphabet.
pub fn base58_decode(input: &str) -> Option<Vec<u8>> {
    bs58::decode(input).into_vec().ok()
}

/// The raw Ed25519 public key inside a PeerId, when it is an identity-multihash Ed25519 PeerId.
pub fn public_key_of(peer_id: &str) -> Option<[u8; 32]> {
    let bytes = base58_decode(peer_id)?;
    let key = bytes.strip_prefix(&[0x00, 0x24, 0x08, 0x01, 0x12, 0x20])?;
    key.try_into().ok()
}

/// The gossipsub message id of a signed message, as js-libp2p's gossipsub (17.x, the default
/// `msgIdFnStrictSign`) computes it: the publisher's public key in its protobuf encoding followed
/// by the 8-byte big-endian sequence number. `publisher` is the PeerId's bytes (a multihash).
///
/// For a PeerId that inlines its key (identity multihash: Ed25519, secp256k1) the protobuf key is
/// the multihash digest, so the id is the PeerId bytes without their 2-byte multihash header. A
/// PeerId that only hashes its key (sha2-256: RSA) does not carry the key; its id is then the
/// whole PeerId bytes followed by the sequence number, as go-libp2p and earlier js-libp2p compute
/// ids for every key type. `docs/hyperspace-wire.md` "Gossipsub message ids".
#[must_use]
pub fn gossip_message_id(publisher: &[u8], seqno: u64) -> Vec<u8> {
    let key = match publisher {
        // identity multihash: code 0x00, then a one-byte length (keys are < 128 bytes) and the
        // protobuf key itself.
        [0x00, len, key @ ..] if usize::from(*len) == key.len() && *len < 0x80 => key,
        _ => publisher,
    };
    let mut id = Vec::with_capacity(key.len() + 8);
    id.extend_from_slice(key);
    id.extend_from_slice(&seqno.to_be_bytes());
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base58_round_trips_with_leading_zeros() {
        for input in [&b""[..], b"\0", b"\0\0abc", b"hello world", &[0xff; 40]] {
            assert_eq!(base58_decode(&base58_encode(input)).unwrap(), input);
        }
        assert_eq!(base58_encode(b"hello world"), "StV1DL6CwTryKyV");
        assert!(base58_decode("0OIl").is_none());
    }

    #[test]
    fn message_ids_are_the_protobuf_key_and_the_sequence_number() {
        let id = peer_id_of(&[7u8; 32]);
        let bytes = base58_decode(&id).unwrap();
        let msg_id = gossip_message_id(&bytes, 0x0102_0304_0506_0708);
        assert_eq!(&msg_id[..4], &[0x08, 0x01, 0x12, 0x20]);
        assert_eq!(&msg_id[4..36], &[7u8; 32]);
        assert_eq!(&msg_id[36..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        // A hashed PeerId (sha2-256 multihash) keeps its bytes whole.
        let hashed = base58_decode("QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N").unwrap();
        let msg_id = gossip_message_id(&hashed, 1);
        assert_eq!(&msg_id[..hashed.len()], &hashed[..]);
        assert_eq!(msg_id.len(), hashed.len() + 8);
    }

    #[test]
    fn ed25519_peer_ids_start_with_12d3koow() {
        let id = peer_id_of(&[7u8; 32]);
        assert!(id.starts_with("12D3KooW"), "{id}");
        assert_eq!(public_key_of(&id), Some([7u8; 32]));
        assert_eq!(
            public_key_of("QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"),
            None
        );
    }
}
