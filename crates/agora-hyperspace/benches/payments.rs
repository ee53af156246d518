//! Credential verification (spec §6.2 `micropayments.verify`): the
//! stateless part of accepting an x402 "exact" payment — decode, challenge checks, EIP-712
//! digest of the EIP-3009 authorization, secp256k1 recovery — on one core, and a voucher's
//! signature check on a USDC channel; then, in the same run, eth-account (Python, PyPI)
//! recovering the same typed data, the nearest competitor on this machine.
//!
//! Run: `cargo bench -p agora-hyperspace --bench payments` (the comparison needs Python with
//! eth-account: `AGORA_ETH_PYTHON`, else `python3`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use agora_hyperspace::payments::assets::UsdcAsset;
use agora_hyperspace::payments::challenge::Challenge;
use agora_hyperspace::payments::channel::{Channel, Currency, Voucher};
use agora_hyperspace::payments::credential::{Credential, check};
use agora_hyperspace::payments::eip712::{self, parse_address};
use agora_hyperspace::payments::hex0x;
use serde_json::{Value, json};

const N: u32 = 5_000;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/vectors/hyperspace/eip712.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn per_second(n: u32, t: std::time::Duration) -> (f64, f64) {
    let each = t.as_secs_f64() / f64::from(n);
    (1.0 / each, each * 1e6)
}

fn main() {
    let v = vectors();
    let x = &v["x402"];
    let credential = json!({
        "x402Version": 2,
        "accepted": {"scheme": "exact", "network": "eip155:84532", "amount": "10000",
            "asset": x["domain"]["verifyingContract"], "payTo": x["authorization"]["to"],
            "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}},
        "payload": {"signature": x["signature"], "authorization": x["authorization"]},
    });
    let usdc = UsdcAsset {
        chain_id: 84532,
        contract: parse_address(x["domain"]["verifyingContract"].as_str().unwrap()).unwrap(),
        name: "USDC".into(),
        version: "2".into(),
    };
    let now_ms = 1_740_672_100_000;
    let challenge = Challenge::new(
        [3; 48],
        "/inference",
        None,
        Some(10_000),
        parse_address(x["authorization"]["to"].as_str().unwrap()),
        "12D3KooWpayee",
        std::slice::from_ref(&usdc),
        now_ms - 1000,
        60_000,
    );
    // warm-up
    for _ in 0..200 {
        let c = Credential::decode(&credential).unwrap();
        check(&c, &challenge, now_ms, |_| None).unwrap();
    }
    let t = Instant::now();
    for _ in 0..N {
        let c = Credential::decode(black_box(&credential)).unwrap();
        black_box(check(&c, &challenge, now_ms, |_| None).unwrap());
    }
    let (rate, us) = per_second(N, t.elapsed());
    println!(
        "| credential verification (decode + checks + EIP-712 digest + secp256k1 recovery), one core | {rate:.0}/s ({us:.1} µs each) |"
    );
    let ours_us = us;

    let decoded = Credential::decode(&credential).unwrap();
    let t = Instant::now();
    for _ in 0..N {
        black_box(check(black_box(&decoded), &challenge, now_ms, |_| None).unwrap());
    }
    let (rate, us) = per_second(N, t.elapsed());
    println!("| the same without decoding the JSON | {rate:.0}/s ({us:.1} µs each) |");

    let key = k256::ecdsa::SigningKey::from_slice(&[5u8; 32]).unwrap();
    let payer = eip712::address_of(&key).to_checksum(None);
    let ch = Channel::open(
        &payer,
        "pp",
        "q",
        Currency::Usdc { chain_id: 84532 },
        1 << 40,
        [3; 16],
        0,
    );
    let digest = alloy_primitives::B256::from_slice(&ch.signed_bytes(1, 7).unwrap());
    let voucher = Voucher {
        channel_id: ch.channel_id.clone(),
        nonce: 1,
        cumulative: 7,
        amount: 7,
        memo: String::new(),
        signature: hex0x(&eip712::sign(&key, &digest).unwrap()),
    };
    let t = Instant::now();
    for _ in 0..N {
        black_box(ch.check_signature(black_box(&voucher), |_| None)).unwrap();
    }
    let (rate, us) = per_second(N, t.elapsed());
    println!(
        "| USDC channel voucher signature check (EIP-712 + recovery), one core | {rate:.0}/s ({us:.1} µs each) |"
    );
    let t = Instant::now();
    for _ in 0..N {
        black_box(eip712::sign(&key, black_box(&digest)).unwrap());
    }
    let (rate, us) = per_second(N, t.elapsed());
    println!("| voucher signing (RFC 6979 secp256k1), one core | {rate:.0}/s ({us:.1} µs each) |");

    let python = std::env::var("AGORA_ETH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = r#"
import json, sys, time
from eth_account import Account
from eth_account.messages import encode_typed_data
v = json.load(open(sys.argv[1]))["x402"]
a = v["authorization"]
typed = {"types": {"EIP712Domain": [{"name": "name", "type": "string"}, {"name": "version", "type": "string"}, {"name": "chainId", "type": "uint256"}, {"name": "verifyingContract", "type": "address"}],
  "TransferWithAuthorization": [{"name": "from", "type": "address"}, {"name": "to", "type": "address"}, {"name": "value", "type": "uint256"}, {"name": "validAfter", "type": "uint256"}, {"name": "validBefore", "type": "uint256"}, {"name": "nonce", "type": "bytes32"}]},
  "primaryType": "TransferWithAuthorization", "domain": v["domain"],
  "message": {"from": a["from"], "to": a["to"], "value": int(a["value"]), "validAfter": int(a["validAfter"]), "validBefore": int(a["validBefore"]), "nonce": bytes.fromhex(a["nonce"][2:])}}
n = 500
for _ in range(20):
    Account.recover_message(encode_typed_data(full_message=typed), signature=v["signature"])
t = time.perf_counter()
for _ in range(n):
    who = Account.recover_message(encode_typed_data(full_message=typed), signature=v["signature"])
dt = (time.perf_counter() - t) / n
assert who == a["from"]
print(dt * 1e6)
"#;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/vectors/hyperspace/eip712.json"
    );
    match std::process::Command::new(&python)
        .args(["-c", script, path])
        .output()
    {
        Ok(out) if out.status.success() => {
            let us: f64 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or(f64::NAN);
            println!(
                "| eth-account `recover_message(encode_typed_data(...))`, same typed data, one core | {:.0}/s ({us:.1} µs each) |",
                1e6 / us
            );
            println!(
                "| ratio (eth-account time / ours, full verification) | {:.1}× |",
                us / ours_us
            );
        }
        _ => println!(
            "skipped: eth-account comparison (set AGORA_ETH_PYTHON to a Python with eth-account)"
        ),
    }
}
