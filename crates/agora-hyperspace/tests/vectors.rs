//! Envelope v2 vectors: the independent signer's (`tests/vectors/hyperspace/envelope-v2.ndjson`)
//! and our golden and tamper vectors (`tests/vectors/hyperspace/golden.json`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use agora_hyperspace::envelope::{signed_bytes, signing_material};
use agora_hyperspace::{Envelope, ReplayWindow, peer_id_of, sign, verify};
use ed25519_dalek::SigningKey;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/hyperspace")
}

fn seed(hex: &str) -> SigningKey {
    let mut b = [0u8; 32];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    SigningKey::from_bytes(&b)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn independent_signer_vectors() {
    let text = std::fs::read_to_string(dir().join("envelope-v2.ndjson")).unwrap();
    let mut n = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let key = seed(v["seed_hex"].as_str().unwrap());
        let pk = key.verifying_key().to_bytes();
        assert_eq!(hex(&pk), v["pk"]);
        assert_eq!(peer_id_of(&pk), v["from"]);
        let (topic, ts, nonce, d) = (
            v["topic"].as_str().unwrap(),
            v["ts"].as_u64().unwrap(),
            v["nonce"].as_str().unwrap(),
            v["d_json"].as_str().unwrap(),
        );
        let from = v["from"].as_str().unwrap();
        assert_eq!(
            hex(&signing_material(ts, nonce, from, d)),
            v["signing_material_hex"]
        );
        let ours = sign(&key, topic, ts, nonce, d).unwrap();
        assert_eq!(
            ours,
            v["envelope"].as_str().unwrap(),
            "byte-identical envelope"
        );
        let env = verify(
            v["envelope"].as_str().unwrap(),
            topic,
            ts,
            &mut ReplayWindow::default(),
        )
        .unwrap();
        assert_eq!(hex(&env.sig), v["sig"]);
        assert_eq!(env.d_json, d);
        n += 1;
    }
    assert!(n >= 2);
}

#[test]
fn golden_and_tamper_vectors() {
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir().join("golden.json")).unwrap()).unwrap();
    assert!(cases.len() >= 8);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let topic = case["topic"].as_str().unwrap();
        let now = case["now"].as_u64().unwrap();
        if let Some(sig) = case.get("sig") {
            // Golden: fixed key, ts, nonce and d give exactly this signature and envelope.
            let key = seed(case["key"].as_str().unwrap());
            let env = sign(
                &key,
                topic,
                case["ts"].as_u64().unwrap(),
                case["nonce"].as_str().unwrap(),
                case["d_json"].as_str().unwrap(),
            )
            .unwrap();
            assert_eq!(env, case["envelope"].as_str().unwrap(), "{name}");
            assert_eq!(hex(&Envelope::parse(&env).unwrap().sig), *sig, "{name}");
        }
        let mut window = ReplayWindow::default();
        let inputs: Vec<&str> = match &case["input"] {
            Value::Array(a) => a.iter().map(|x| x.as_str().unwrap()).collect(),
            _ => vec![case["envelope"].as_str().unwrap()],
        };
        let want: Vec<&str> = case["expect"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        let got: Vec<&str> = inputs
            .iter()
            .map(|i| match verify(i, topic, now, &mut window) {
                Ok(_) => "ok",
                Err(e) => e.reason(),
            })
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn signature_covers_the_topic_byte_for_byte() {
    let m = [9u8; 32];
    let b = signed_bytes("hyperspace/tasks/x", &m);
    assert_eq!(&b[..18], b"hyperspace/tasks/x");
    assert_eq!(b[18], 0);
    assert_eq!(&b[19..], &m);
}
