//! The ANS governance-key signature on DISCOVER results: `ans_signature` (discovery draft §3.4,
//! §4.1 item 3, §7.1).
//!
//! What this module owns: the ES256 key types of an ANS server's governance key, their JWK form
//! (how the key is published in the ANS server's own manifest, §7.1), signing a DISCOVER `result`
//! object and verifying one. It does not decide *which* keys a client trusts; callers pass them.
//!
//! The pinned format:
//!
//! - Algorithm `"ES256"`: ECDSA over P-256 with SHA-256 (RFC 7518 §3.4), the draft's example.
//! - `value`: the 64-byte `r ‖ s` signature (each big-endian, 32 bytes), base64url without
//!   padding (RFC 4648 §5), as in JWS. Nothing else is accepted (no DER, no padding, no standard
//!   alphabet).
//! - Coverage: the RFC 8785 canonical bytes ([`crate::jcs`]) of the whole DISCOVER `result` object
//!   with its `ans_signature` member removed. So `query_id`, `total_matches`, `returned`,
//!   `results` (every manifest field), `federation_path` and any other member of `result` are
//!   covered, which is what §3.4 asks ("covers the full result set including all manifests and the
//!   query_id"). The response envelope around `result` (`status`, `task_id`) is not covered.
//!   `DISCOVER /population` answers with no envelope ([`crate::discover::population_body`]):
//!   there the signed object is the whole body, by the same rule.
//! - Signing is deterministic (RFC 6979), and the signer normalises `s` to the low half of the
//!   group order (`Signature::normalize_s`), so one key and one result always give the same bytes.
//!   p256's ECDSA does not enforce low-S on verification and neither do we: a verifier accepts
//!   both `s` and `n - s`, as other ES256 implementations (WebCrypto, OpenSSL) do.
//! - The `key_id` names the key; a verifier picks the key by it ([`verify_result_with`]) and
//!   rejects ids it does not hold.
//!
//! Sans-IO: keys are made from caller-supplied secret bytes; nothing here draws randomness.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::jcs;

/// The only signature algorithm: ECDSA P-256 with SHA-256.
pub const ALGORITHM: &str = "ES256";

/// The name of the signature member inside the DISCOVER `result` object.
pub const FIELD: &str = "ans_signature";

/// Length of an ES256 signature (`r ‖ s`).
pub const SIGNATURE_LEN: usize = 64;

/// The `ans_signature` member: `{"algorithm": "ES256", "key_id": …, "value": …}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct AnsSignature {
    /// Always [`ALGORITHM`] when produced here.
    pub algorithm: String,
    /// Which governance key signed.
    pub key_id: String,
    /// base64url (unpadded) `r ‖ s`.
    pub value: String,
}

impl AnsSignature {
    /// Reads `result.ans_signature`: [`SignatureError::Missing`] when `result` is not an object or
    /// has no such member, [`SignatureError::Encoding`] when the member is not an object with
    /// string `algorithm`, `key_id` and `value`.
    pub fn from_result(result: &Value) -> Result<Self, SignatureError> {
        let member = result.get(FIELD).ok_or(SignatureError::Missing)?;
        Self::deserialize(member).map_err(|e| SignatureError::Encoding(format!("{FIELD}: {e}")))
    }

    /// As a JSON object.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("algorithm".into(), Value::String(self.algorithm.clone()));
        m.insert("key_id".into(), Value::String(self.key_id.clone()));
        m.insert("value".into(), Value::String(self.value.clone()));
        Value::Object(m)
    }
}

/// Why a signature could not be made or checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The result carries no `ans_signature` (an unsigned DISCOVER result MUST be rejected).
    #[error("the DISCOVER result carries no ans_signature")]
    Missing,
    /// `ans_signature.algorithm` is not `ES256`.
    #[error("unsupported ans_signature algorithm {0:?} (only ES256 is accepted)")]
    UnsupportedAlgorithm(String),
    /// No trusted key has this `key_id`.
    #[error("ans_signature key_id {0:?} is not a trusted ANS key")]
    UnknownKey(String),
    /// The signature member or value is malformed (not base64url, not 64 bytes, wrong shape).
    #[error("malformed ans_signature: {0}")]
    Encoding(String),
    /// The signature does not verify over the canonical bytes: the result was altered, or it was
    /// signed by another key.
    #[error("ans_signature does not verify")]
    Invalid,
    /// A key could not be built (bad secret scalar, bad JWK, point not on P-256).
    #[error("invalid ES256 key: {0}")]
    InvalidKey(String),
}

impl SignatureError {
    /// A stable machine-readable name (used by the test vectors and logs).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::UnsupportedAlgorithm(_) => "unsupported-algorithm",
            Self::UnknownKey(_) => "unknown-key",
            Self::Encoding(_) => "encoding",
            Self::Invalid => "invalid",
            Self::InvalidKey(_) => "invalid-key",
        }
    }
}

/// An ANS governance signing key (ES256) with its `key_id`.
#[derive(Clone)]
pub struct AnsSigningKey {
    key: SigningKey,
    key_id: String,
}

impl AnsSigningKey {
    /// A key from a 32-byte big-endian secret scalar. The caller supplies the randomness (32 bytes
    /// from a CSPRNG are a valid scalar with overwhelming probability). Zero and values not below
    /// the P-256 group order are rejected.
    pub fn from_secret_bytes(
        bytes: &[u8; 32],
        key_id: impl Into<String>,
    ) -> Result<Self, SignatureError> {
        let key = SigningKey::from_slice(bytes).map_err(|_| {
            SignatureError::InvalidKey(
                "secret scalar is zero or not below the P-256 group order".into(),
            )
        })?;
        Ok(Self {
            key,
            key_id: key_id.into(),
        })
    }

    /// The 32-byte big-endian secret scalar (for persisting the key; handle with care).
    pub fn secret_bytes(&self) -> [u8; 32] {
        self.key.to_bytes().into()
    }

    /// The `key_id` put into every signature.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public half, with the same `key_id`.
    pub fn verifying_key(&self) -> AnsVerifyingKey {
        AnsVerifyingKey {
            key: *self.key.verifying_key(),
            key_id: self.key_id.clone(),
        }
    }

    /// Signs `msg` (ES256, RFC 6979 deterministic, low-S) and returns base64url `r ‖ s`.
    pub fn sign_bytes(&self, msg: &[u8]) -> String {
        let signature: Signature = self.key.sign(msg);
        URL_SAFE_NO_PAD.encode(signature.normalize_s().to_bytes())
    }

    /// Signs the RFC 8785 canonical bytes of `value`.
    pub fn sign_canonical(&self, value: &Value) -> String {
        self.sign_bytes(&jcs::canonicalize(value))
    }

    /// Signs a DISCOVER `result` object in place: removes any existing `ans_signature`, signs the
    /// canonical bytes of the rest, and inserts
    /// `ans_signature: {"algorithm": "ES256", "key_id": …, "value": …}`.
    pub fn sign_result(&self, result: &mut Map<String, Value>) {
        result.remove(FIELD);
        let value = self.sign_bytes(&jcs::canonicalize_object_excluding(result, FIELD));
        let signature = AnsSignature {
            algorithm: ALGORITHM.to_owned(),
            key_id: self.key_id.clone(),
            value,
        };
        result.insert(FIELD.to_owned(), signature.to_value());
    }
}

impl fmt::Debug for AnsSigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnsSigningKey")
            .field("key_id", &self.key_id)
            .field("algorithm", &ALGORITHM)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// An ANS governance verifying key (ES256 public key) with its `key_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnsVerifyingKey {
    key: VerifyingKey,
    key_id: String,
}

impl AnsVerifyingKey {
    /// From a SEC1-encoded point (compressed `02|03 ‖ x` or uncompressed `04 ‖ x ‖ y`).
    pub fn from_sec1(bytes: &[u8], key_id: impl Into<String>) -> Result<Self, SignatureError> {
        let key = VerifyingKey::from_sec1_bytes(bytes)
            .map_err(|_| SignatureError::InvalidKey("not a SEC1-encoded point on P-256".into()))?;
        Ok(Self {
            key,
            key_id: key_id.into(),
        })
    }

    /// The uncompressed SEC1 encoding `04 ‖ x ‖ y` (65 bytes).
    pub fn to_sec1_uncompressed(&self) -> Vec<u8> {
        self.key.to_sec1_point(false).as_bytes().to_vec()
    }

    /// The key's `key_id`.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public JWK (RFC 7517/7518 §6.2) published in the ANS server's manifest:
    /// `{"kty":"EC","crv":"P-256","x":…,"y":…,"kid":key_id,"alg":"ES256","use":"sig"}`.
    pub fn to_jwk(&self) -> Value {
        let point = self.key.to_sec1_point(false);
        let coord = |c: Option<&[u8]>| {
            Value::String(c.map(|c| URL_SAFE_NO_PAD.encode(c)).unwrap_or_default())
        };
        let mut m = Map::new();
        m.insert("kty".into(), Value::String("EC".into()));
        m.insert("crv".into(), Value::String("P-256".into()));
        m.insert("x".into(), coord(point.x().map(|x| x.as_slice())));
        m.insert("y".into(), coord(point.y().map(|y| y.as_slice())));
        m.insert("kid".into(), Value::String(self.key_id.clone()));
        m.insert("alg".into(), Value::String(ALGORITHM.into()));
        m.insert("use".into(), Value::String("sig".into()));
        Value::Object(m)
    }

    /// From a public JWK. `kid` (the `key_id`), `x` and `y` (32 bytes each, base64url unpadded)
    /// are required; `kty` must be `EC`, and `crv` (`P-256`), `alg` (`ES256`) and `use` (`sig`)
    /// are checked when present. The point must lie on P-256.
    pub fn from_jwk(jwk: &Value) -> Result<Self, SignatureError> {
        let obj = jwk
            .as_object()
            .ok_or_else(|| SignatureError::InvalidKey("JWK is not a JSON object".into()))?;
        let field = |name: &str| -> Result<Option<&str>, SignatureError> {
            match obj.get(name) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(_) => Err(SignatureError::InvalidKey(format!(
                    "JWK member {name:?} is not a string"
                ))),
            }
        };
        let expect = |name: &str, want: &str, required: bool| -> Result<(), SignatureError> {
            match field(name)? {
                Some(got) if got == want => Ok(()),
                None if !required => Ok(()),
                got => Err(SignatureError::InvalidKey(format!(
                    "JWK {name} is {got:?}, expected {want:?}"
                ))),
            }
        };
        expect("kty", "EC", true)?;
        expect("crv", "P-256", false)?;
        expect("alg", ALGORITHM, false)?;
        expect("use", "sig", false)?;
        let kid =
            field("kid")?.ok_or_else(|| SignatureError::InvalidKey("JWK has no kid".into()))?;
        let mut sec1 = [0u8; 65];
        sec1[0] = 0x04;
        for (name, range) in [("x", 1..33), ("y", 33..65)] {
            let text = field(name)?
                .ok_or_else(|| SignatureError::InvalidKey(format!("JWK has no {name}")))?;
            let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|e| {
                SignatureError::InvalidKey(format!("JWK {name} is not base64url: {e}"))
            })?;
            if bytes.len() != 32 {
                return Err(SignatureError::InvalidKey(format!(
                    "JWK {name} is {} bytes, expected 32",
                    bytes.len()
                )));
            }
            sec1[range].copy_from_slice(&bytes);
        }
        Self::from_sec1(&sec1, kid)
    }

    /// Verifies base64url `r ‖ s` over `msg`.
    pub fn verify_bytes(&self, msg: &[u8], signature_b64u: &str) -> Result<(), SignatureError> {
        let signature = decode_signature(signature_b64u)?;
        self.key
            .verify(msg, &signature)
            .map_err(|_| SignatureError::Invalid)
    }

    /// Verifies `signature_b64u` over the RFC 8785 canonical bytes of `value`.
    pub fn verify_canonical(
        &self,
        value: &Value,
        signature_b64u: &str,
    ) -> Result<(), SignatureError> {
        self.verify_bytes(&jcs::canonicalize(value), signature_b64u)
    }

    /// Verifies the `ans_signature` of a DISCOVER `result` object with this key. Checks, in
    /// order: the member is present ([`SignatureError::Missing`]) and well-formed
    /// ([`SignatureError::Encoding`]), `algorithm` is `ES256`
    /// ([`SignatureError::UnsupportedAlgorithm`]), `key_id` is this key's
    /// ([`SignatureError::UnknownKey`]), `value` is 64 base64url bytes
    /// ([`SignatureError::Encoding`]), and the signature holds over the canonical bytes of the
    /// result without `ans_signature` ([`SignatureError::Invalid`]).
    pub fn verify_result(&self, result: &Value) -> Result<(), SignatureError> {
        verify_result_with(std::slice::from_ref(self), result)
    }
}

/// Verifies the `ans_signature` of a DISCOVER `result` object with whichever of `keys` has the
/// signature's `key_id` (errors as for [`AnsVerifyingKey::verify_result`]).
pub fn verify_result_with(keys: &[AnsVerifyingKey], result: &Value) -> Result<(), SignatureError> {
    let (map, signature) = match result {
        Value::Object(map) => (map, AnsSignature::from_result(result)?),
        _ => return Err(SignatureError::Missing),
    };
    if signature.algorithm != ALGORITHM {
        return Err(SignatureError::UnsupportedAlgorithm(signature.algorithm));
    }
    let key = keys
        .iter()
        .find(|k| k.key_id == signature.key_id)
        .ok_or(SignatureError::UnknownKey(signature.key_id))?;
    let raw = decode_signature(&signature.value)?;
    key.key
        .verify(&jcs::canonicalize_object_excluding(map, FIELD), &raw)
        .map_err(|_| SignatureError::Invalid)
}

/// base64url (unpadded) to a 64-byte signature. Wrong alphabet, padding or length is
/// [`SignatureError::Encoding`]; 64 bytes whose `r` or `s` is zero or not below the group order
/// cannot verify and are [`SignatureError::Invalid`].
fn decode_signature(b64u: &str) -> Result<Signature, SignatureError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(b64u)
        .map_err(|e| SignatureError::Encoding(format!("value is not unpadded base64url: {e}")))?;
    if bytes.len() != SIGNATURE_LEN {
        return Err(SignatureError::Encoding(format!(
            "value is {} bytes, expected {SIGNATURE_LEN}",
            bytes.len()
        )));
    }
    Signature::from_slice(&bytes).map_err(|_| SignatureError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key() -> AnsSigningKey {
        let mut secret = [0u8; 32];
        secret[31] = 7;
        AnsSigningKey::from_secret_bytes(&secret, "k1").unwrap()
    }

    fn result() -> Map<String, Value> {
        match json!({"query_id": "q", "total_matches": 1, "returned": 1,
                     "results": [{"rank": 1, "canonical_id": "abc"}]})
        {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn rejects_out_of_range_secrets() {
        assert!(AnsSigningKey::from_secret_bytes(&[0; 32], "k").is_err());
        assert!(AnsSigningKey::from_secret_bytes(&[0xff; 32], "k").is_err());
        let k = key();
        assert_eq!(
            AnsSigningKey::from_secret_bytes(&k.secret_bytes(), "k1")
                .unwrap()
                .verifying_key(),
            k.verifying_key()
        );
    }

    #[test]
    fn signs_deterministically_and_low_s() {
        let k = key();
        let a = k.sign_bytes(b"hello");
        assert_eq!(a, k.sign_bytes(b"hello"));
        let raw = URL_SAFE_NO_PAD.decode(&a).unwrap();
        let sig = Signature::from_slice(&raw).unwrap();
        assert_eq!(sig, sig.normalize_s());
        k.verifying_key().verify_bytes(b"hello", &a).unwrap();
        assert_eq!(
            k.verifying_key().verify_bytes(b"hellO", &a),
            Err(SignatureError::Invalid)
        );
    }

    use hex::encode as hex;

    #[test]
    fn rfc6979_a_2_5_known_answer() {
        // RFC 6979 A.2.5 (P-256, SHA-256, message "sample"): r and s as published; s is in the
        // high half, so the signer emits n - s.
        let mut secret = [0u8; 32];
        let x = "c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721";
        hex::decode_to_slice(x, &mut secret).unwrap();
        let k = AnsSigningKey::from_secret_bytes(&secret, "rfc6979").unwrap();
        let point = k.verifying_key().to_sec1_uncompressed();
        assert_eq!(
            hex(&point[1..33]),
            "60fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6"
        );
        assert_eq!(
            hex(&point[33..]),
            "7903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299"
        );
        let raw = URL_SAFE_NO_PAD.decode(k.sign_bytes(b"sample")).unwrap();
        assert_eq!(
            hex(&raw[..32]),
            "efd48b2aacb6a8fd1140dd9cd45e81d69d2c877b56aaf991c34d0ea84eaf3716"
        );
        // n - 0xf7cb1c942d657c41d436c7a1b6e29f65f3e900dbb9aff4064dc4ab2f843acda8
        assert_eq!(
            hex(&raw[32..]),
            "0834e36ad29a83bf2bc9385e491d6099c8fdf9d1ed67aa7ea5f51f93782857a9"
        );
    }

    #[test]
    fn high_s_is_accepted_on_verify() {
        // s' = n - s also verifies: build it by negating s.
        let k = key();
        let sig =
            Signature::from_slice(&URL_SAFE_NO_PAD.decode(k.sign_bytes(b"m")).unwrap()).unwrap();
        let (r, s) = sig.split_scalars();
        let high = Signature::from_scalars(r.to_bytes(), (-*s).to_bytes()).unwrap();
        assert_ne!(high, sig);
        let high_b64 = URL_SAFE_NO_PAD.encode(high.to_bytes());
        k.verifying_key().verify_bytes(b"m", &high_b64).unwrap();
    }

    #[test]
    fn sign_result_round_trip_and_resign() {
        let k = key();
        let mut r = result();
        r.insert(FIELD.into(), json!("junk"));
        k.sign_result(&mut r);
        let v = Value::Object(r.clone());
        k.verifying_key().verify_result(&v).unwrap();
        assert_eq!(v[FIELD]["algorithm"], "ES256");
        assert_eq!(v[FIELD]["key_id"], "k1");
        // Re-signing a signed result gives the same signature (the old one is not covered).
        let mut again = r;
        k.sign_result(&mut again);
        assert_eq!(Value::Object(again), v);
    }

    #[test]
    fn verify_result_errors() {
        let k = key();
        let vk = k.verifying_key();
        let mut r = result();
        k.sign_result(&mut r);
        let signed = Value::Object(r);

        assert_eq!(vk.verify_result(&json!([])), Err(SignatureError::Missing));
        assert_eq!(vk.verify_result(&json!({})), Err(SignatureError::Missing));
        let mut bad = signed.clone();
        bad[FIELD] = json!("x");
        assert_eq!(
            vk.verify_result(&bad).map_err(|e| e.kind()),
            Err("encoding")
        );
        let mut bad = signed.clone();
        bad[FIELD]["algorithm"] = json!("EdDSA");
        assert_eq!(
            vk.verify_result(&bad),
            Err(SignatureError::UnsupportedAlgorithm("EdDSA".into()))
        );
        let mut bad = signed.clone();
        bad[FIELD]["key_id"] = json!("k2");
        assert_eq!(
            vk.verify_result(&bad),
            Err(SignatureError::UnknownKey("k2".into()))
        );
        let mut bad = signed.clone();
        bad[FIELD]["value"] = json!(URL_SAFE_NO_PAD.encode([0u8; 64]));
        assert_eq!(vk.verify_result(&bad), Err(SignatureError::Invalid));
        let mut bad = signed.clone();
        bad["query_id"] = json!("q2");
        assert_eq!(vk.verify_result(&bad), Err(SignatureError::Invalid));

        let other = AnsSigningKey::from_secret_bytes(&[1; 32], "k2").unwrap();
        let keys = [other.verifying_key(), vk];
        verify_result_with(&keys, &signed).unwrap();
        assert_eq!(
            verify_result_with(&keys[..1], &signed),
            Err(SignatureError::UnknownKey("k1".into()))
        );
    }

    #[test]
    fn jwk_round_trip_and_checks() {
        let vk = key().verifying_key();
        let jwk = vk.to_jwk();
        assert_eq!(jwk["kty"], "EC");
        assert_eq!(jwk["kid"], "k1");
        assert_eq!(AnsVerifyingKey::from_jwk(&jwk).unwrap(), vk);
        assert_eq!(
            AnsVerifyingKey::from_sec1(&vk.to_sec1_uncompressed(), "k1").unwrap(),
            vk
        );
        for (member, value) in [
            ("kty", json!("RSA")),
            ("crv", json!("P-384")),
            ("alg", json!("ES384")),
            ("use", json!("enc")),
            ("kid", json!(1)),
            ("x", json!("AAAA")),
            ("y", json!(URL_SAFE_NO_PAD.encode([0u8; 32]))),
        ] {
            let mut bad = jwk.clone();
            bad[member] = value;
            assert!(
                matches!(
                    AnsVerifyingKey::from_jwk(&bad),
                    Err(SignatureError::InvalidKey(_))
                ),
                "{member}"
            );
        }
        let mut minimal = jwk;
        for m in ["crv", "alg", "use"] {
            minimal.as_object_mut().unwrap().remove(m);
        }
        assert_eq!(AnsVerifyingKey::from_jwk(&minimal).unwrap(), vk);
        assert!(AnsVerifyingKey::from_sec1(&[4; 65], "k").is_err());
    }

    #[test]
    fn debug_hides_the_secret() {
        let k = key();
        let shown = format!("{k:?}");
        assert!(shown.contains("k1") && shown.contains("redacted"));
        assert!(!shown.contains(&hex(k.secret_bytes())));
    }
}
