//! Ed25519 verification under the `verify_strict` rule, for a sender key that is decoded once and
//! then reused for every message from that sender.
//!
//! The v2 envelope pins ed25519-dalek's `VerifyingKey::verify_strict` (spec §2.1, pinned in
//! `docs/hyperspace-wire.md`). That rule accepts a signature `(R, s)` on `M` under the key bytes
//! `A` exactly when
//! 1. `s` is a canonical scalar (`s < ℓ`),
//! 2. `A` and `R` decode to curve points, neither of small order, and
//! 3. the encoding of `[s]B − [k]A`, with `k = SHA-512(R ‖ A ‖ M) mod ℓ`, is the 32 bytes `R`.
//!
//! ed25519-dalek decodes `R` (a square root) only to test its order, and tests `A`'s order on
//! every call. Here `A` is decoded and its order tested once, in [`StrictKey::from_bytes`], and
//! `R`'s order is tested on the point `P = [s]B − [k]A` after condition 3 holds: its canonical
//! encoding equals `R`, so `R` decodes to `P`, and the two tests agree. A non-canonical `R` can
//! never equal an encoding that `compress` produced, so it fails condition 3 here as it does in
//! ed25519-dalek. The accepted set is the same; the saving is one field square root per message.
//! The unit tests check the equivalence against ed25519-dalek on valid, tampered, small-order and
//! non-canonical inputs.

use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use sha2::{Digest as _, Sha512};

/// A decoded Ed25519 public key, ready for repeated strict verification.
#[derive(Clone, Copy, Debug)]
pub struct StrictKey {
    /// The key bytes as given (hashed into `k` exactly as received).
    bytes: [u8; 32],
    /// `−A`, the negated key point.
    minus_a: EdwardsPoint,
    /// `A` has small order: every signature under it is refused.
    small_order: bool,
}

impl StrictKey {
    /// Decodes `bytes`; `None` if they are not the encoding of a curve point.
    pub fn from_bytes(bytes: &[u8; 32]) -> Option<Self> {
        let a = CompressedEdwardsY(*bytes).decompress()?;
        Some(Self {
            bytes: *bytes,
            minus_a: -a,
            small_order: a.is_small_order(),
        })
    }

    /// Whether `sig` is a valid signature on the concatenation of `message` under this key, by the
    /// `verify_strict` rule.
    pub fn verify(&self, message: &[&[u8]], sig: &[u8; 64]) -> bool {
        if self.small_order {
            return false;
        }
        let (r, s) = sig.split_at(32);
        let Some(s) = <[u8; 32]>::try_from(s)
            .ok()
            .and_then(|s| Option::<Scalar>::from(Scalar::from_canonical_bytes(s)))
        else {
            return false;
        };
        let mut h = Sha512::new();
        h.update(r);
        h.update(self.bytes);
        for part in message {
            h.update(part);
        }
        let k = Scalar::from_bytes_mod_order_wide(&h.finalize().into());
        let p = EdwardsPoint::vartime_double_scalar_mul_basepoint(&k, &self.minus_a, &s);
        p.compress().as_bytes() == r && !p.is_small_order()
    }
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
    use proptest::prelude::*;

    use super::*;

    /// ed25519-dalek's verdict for the same inputs (`None` key: the bytes do not decode).
    fn dalek(pk: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
        VerifyingKey::from_bytes(pk)
            .map(|k| k.verify_strict(msg, &Signature::from_bytes(sig)).is_ok())
            .unwrap_or(false)
    }

    fn ours(pk: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
        StrictKey::from_bytes(pk).is_some_and(|k| k.verify(&[msg], sig))
    }

    /// The order of the curve's prime-order subgroup, little-endian.
    const ELL: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];

    /// Little-endian `a + b` over 32 bytes (no overflow for the values used here).
    fn add_le(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
        let mut out = [0u8; 32];
        let mut carry = 0u16;
        for i in 0..32 {
            let v = u16::from(a[i]) + u16::from(b[i]) + carry;
            out[i] = (v & 0xff) as u8;
            carry = v >> 8;
        }
        out
    }

    /// Encodings of the eight points of small order, canonical and not.
    fn small_order_encodings() -> Vec<[u8; 32]> {
        [
            // identity (y = 1), order 2 (y = −1), order 4 (y = 0, both x signs)
            "0100000000000000000000000000000000000000000000000000000000000000",
            "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
            "0000000000000000000000000000000000000000000000000000000000000000",
            "0000000000000000000000000000000000000000000000000000000000000080",
            // order 8
            "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
            "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
            "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
            "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
            // non-canonical: y = p + 1 (the identity again), y = p (zero again)
            "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
            "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        ]
        .map(|h| crate::envelope::unhex::<32>(h).unwrap())
        .to_vec()
    }

    #[test]
    fn accepts_what_dalek_signs() {
        for seed in 0u8..32 {
            let key = SigningKey::from_bytes(&[seed; 32]);
            let pk = key.verifying_key().to_bytes();
            let msg = [b"hyperspace/tasks/x\0".as_slice(), &[seed; 32]].concat();
            let sig = key.sign(&msg).to_bytes();
            assert!(ours(&pk, &msg, &sig));
            assert!(dalek(&pk, &msg, &sig));
            // the message in parts verifies as the whole
            let k = StrictKey::from_bytes(&pk).unwrap();
            assert!(k.verify(&[&msg[..5], &msg[5..]], &sig));
        }
    }

    #[test]
    fn refuses_a_non_canonical_s_as_dalek_does() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let pk = key.verifying_key().to_bytes();
        let sig = key.sign(b"m").to_bytes();
        let mut s = [0u8; 32];
        s.copy_from_slice(&sig[32..]);
        let mut forged = sig;
        forged[32..].copy_from_slice(&add_le(&s, &ELL));
        assert!(!dalek(&pk, b"m", &forged));
        assert!(!ours(&pk, b"m", &forged));
    }

    #[test]
    fn small_order_keys_and_nonces_agree_with_dalek() {
        let encodings = small_order_encodings();
        // With a small-order key A and s = 0, [s]B − [k]A has small order: R chosen as that
        // point's encoding passes the equation and must still be refused.
        for a in &encodings {
            for r in &encodings {
                for msg in [b"".as_slice(), b"m", b"hyperspace"] {
                    let mut sig = [0u8; 64];
                    sig[..32].copy_from_slice(r);
                    assert_eq!(ours(a, msg, &sig), dalek(a, msg, &sig), "A {a:?} R {r:?}");
                    assert!(!ours(a, msg, &sig));
                }
            }
        }
        // A valid key with a small-order R.
        let key = SigningKey::from_bytes(&[9; 32]);
        let pk = key.verifying_key().to_bytes();
        for r in &encodings {
            let mut sig = key.sign(b"m").to_bytes();
            sig[..32].copy_from_slice(r);
            assert_eq!(ours(&pk, b"m", &sig), dalek(&pk, b"m", &sig));
        }
    }

    #[test]
    fn a_key_that_does_not_decode_is_refused() {
        // y = 2 has no x on the curve.
        let mut bad = [0u8; 32];
        bad[0] = 2;
        assert!(StrictKey::from_bytes(&bad).is_none());
        assert!(VerifyingKey::from_bytes(&bad).is_err());
    }

    proptest! {
        #[test]
        fn matches_dalek_on_tampered_signatures(
            seed in any::<[u8; 32]>(),
            msg in proptest::collection::vec(any::<u8>(), 0..200),
            flip in 0usize..(64 * 8 + 1),
            other_msg in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let key = SigningKey::from_bytes(&seed);
            let pk = key.verifying_key().to_bytes();
            let mut sig = key.sign(&msg).to_bytes();
            if flip < 64 * 8 {
                sig[flip / 8] ^= 1 << (flip % 8);
            }
            prop_assert_eq!(ours(&pk, &msg, &sig), dalek(&pk, &msg, &sig));
            prop_assert_eq!(ours(&pk, &other_msg, &sig), dalek(&pk, &other_msg, &sig));
        }

        #[test]
        fn matches_dalek_on_arbitrary_bytes(
            pk in any::<[u8; 32]>(),
            r in any::<[u8; 32]>(),
            s in any::<[u8; 32]>(),
            msg in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut sig = [0u8; 64];
            sig[..32].copy_from_slice(&r);
            sig[32..].copy_from_slice(&s);
            prop_assert_eq!(ours(&pk, &msg, &sig), dalek(&pk, &msg, &sig));
        }
    }
}
