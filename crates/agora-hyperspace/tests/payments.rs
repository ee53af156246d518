//! Micropayments vectors (`tests/vectors/hyperspace/eip712.json`): the EIP-712 specification's
//! "Mail" example, the x402 specification's example payment, and payments from a well-known key
//! signed by Python eth-account; then the credential checks on the x402 example.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agora_hyperspace::payments::assets::UsdcAsset;
use agora_hyperspace::payments::challenge::Challenge;
use agora_hyperspace::payments::credential::{Credential, Refusal, check};
use agora_hyperspace::payments::eip712::{self, Authorization, parse_address};
use agora_hyperspace::payments::unhex;
use alloy_primitives::{Address, B256};
use alloy_sol_types::{Eip712Domain, SolStruct, sol};
use serde_json::{Value, json};

sol! {
    struct Person {
        string name;
        address wallet;
    }
    struct Mail {
        Person from;
        Person to;
        string contents;
    }
}

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/vectors/hyperspace/eip712.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn b256(v: &Value) -> B256 {
    B256::from(unhex::<32>(v.as_str().unwrap()).unwrap())
}

fn addr(v: &Value) -> Address {
    parse_address(v.as_str().unwrap()).unwrap()
}

fn domain(d: &Value) -> Eip712Domain {
    eip712::token_domain(
        d["name"].as_str().unwrap(),
        d["version"].as_str().unwrap(),
        d["chainId"].as_u64().unwrap(),
        addr(&d["verifyingContract"]),
    )
}

fn authorization(a: &Value) -> Authorization {
    let n = |f: &str| a[f].as_str().unwrap().parse::<u64>().unwrap();
    Authorization {
        from: addr(&a["from"]),
        to: addr(&a["to"]),
        value: u128::from(n("value")),
        valid_after: n("validAfter"),
        valid_before: n("validBefore"),
        nonce: unhex::<32>(a["nonce"].as_str().unwrap()).unwrap(),
    }
}

fn key(v: &Value) -> k256::ecdsa::SigningKey {
    k256::ecdsa::SigningKey::from_slice(&unhex::<32>(v.as_str().unwrap()).unwrap()).unwrap()
}

#[test]
fn the_eip712_mail_example_reproduces_its_published_digest_and_signature() {
    let v = &vectors()["mail"];
    let d = domain(&v["domain"]);
    let m = &v["message"];
    let person = |p: &Value| Person {
        name: p["name"].as_str().unwrap().to_owned(),
        wallet: addr(&p["wallet"]),
    };
    let mail = Mail {
        from: person(&m["from"]),
        to: person(&m["to"]),
        contents: m["contents"].as_str().unwrap().to_owned(),
    };
    assert_eq!(d.type_hash(), b256(&v["domainTypeHash"]));
    assert_eq!(mail.eip712_type_hash(), b256(&v["mailTypeHash"]));
    assert_eq!(d.separator(), b256(&v["domainSeparator"]));
    assert_eq!(mail.eip712_hash_struct(), b256(&v["hashStruct"]));
    let digest = mail.eip712_signing_hash(&d);
    assert_eq!(digest, b256(&v["digest"]));
    let k = key(&v["privateKey"]);
    assert_eq!(eip712::address_of(&k), mail.from.wallet);
    let sig = eip712::sign(&k, &digest).unwrap();
    assert_eq!(
        agora_hyperspace::payments::hex0x(&sig),
        v["signature"].as_str().unwrap()
    );
    assert_eq!(eip712::recover(&digest, &sig), Ok(mail.from.wallet));
}

#[test]
fn the_x402_example_recovers_to_its_payer_only_under_its_own_domain() {
    let v = &vectors()["x402"];
    let auth = authorization(&v["authorization"]);
    assert_eq!(auth.typed().eip712_type_hash(), b256(&v["typeHash"]));
    let d = domain(&v["domain"]);
    let digest = auth.digest(&d);
    assert_eq!(digest, b256(&v["digest"]));
    let sig = unhex::<65>(v["signature"].as_str().unwrap()).unwrap();
    assert_eq!(eip712::recover(&digest, &sig), Ok(auth.from));
    let mut wrong = v["domain"].clone();
    wrong["name"] = json!("USD Coin");
    assert_eq!(
        eip712::recover(&auth.digest(&domain(&wrong)), &sig),
        Ok(addr(&v["underUsdCoinRecoversTo"]))
    );
}

#[test]
fn eth_account_signatures_of_a_known_key_are_reproduced() {
    let v = &vectors()["hardhat0"];
    let k = key(&v["privateKey"]);
    assert_eq!(eip712::address_of(&k), addr(&v["address"]));
    let auth = authorization(&v["authorization"]);
    assert_eq!(auth.typed().eip712_hash_struct(), b256(&v["structHash"]));
    for case in v["domains"].as_array().unwrap() {
        let d = domain(&case["domain"]);
        assert_eq!(d.separator(), b256(&case["domainSeparator"]));
        let digest = auth.digest(&d);
        assert_eq!(digest, b256(&case["digest"]));
        let sig = eip712::sign(&k, &digest).unwrap();
        assert_eq!(
            agora_hyperspace::payments::hex0x(&sig),
            case["signature"].as_str().unwrap()
        );
    }
}

/// The x402 example's credential checked as a node would, at a time inside its window.
#[test]
fn the_x402_example_credential_passes_the_checks_and_each_tampering_is_named() {
    let v = &vectors()["x402"];
    let a = &v["authorization"];
    let credential = json!({
        "x402Version": 2,
        "accepted": {"scheme": "exact", "network": "eip155:84532", "amount": "10000",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60,
            "extra": {"name": "USDC", "version": "2"}},
        "payload": {"signature": v["signature"], "authorization": a},
    });
    let usdc = UsdcAsset {
        chain_id: 84532,
        contract: addr(&v["domain"]["verifyingContract"]),
        name: "USDC".into(),
        version: "2".into(),
    };
    let now_ms = 1_740_672_100_000;
    let challenge = |price: u128, pay_to: &str| {
        Challenge::new(
            [3; 48],
            "/inference",
            None,
            Some(price),
            parse_address(pay_to),
            "12D3KooWpayee",
            std::slice::from_ref(&usdc),
            now_ms - 1000,
            60_000,
        )
    };
    let payee = a["to"].as_str().unwrap();
    let ok = Credential::decode(&credential).unwrap();
    let verified = check(&ok, &challenge(10_000, payee), now_ms, |_| None).unwrap();
    assert_eq!(verified.payer, "0x857b06519E91e3A54538791bDbb0E22373e36b66");
    assert_eq!(verified.amount, 10_000);
    // base64 of the same JSON decodes to the same credential
    let b64 = base64_of(&credential);
    assert_eq!(Credential::decode(&json!(b64)).unwrap(), ok);
    // a price above the value, another payee, before and after the window
    let refused =
        |c: &Credential, ch: &Challenge, now: u64| check(c, ch, now, |_| None).unwrap_err();
    assert!(matches!(
        refused(&ok, &challenge(10_001, payee), now_ms),
        Refusal::Amount { .. }
    ));
    assert!(matches!(
        refused(
            &ok,
            &challenge(10_000, "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
            now_ms
        ),
        Refusal::Recipient(_)
    ));
    assert!(matches!(
        refused(&ok, &challenge(10_000, payee), 1_740_672_088_000),
        Refusal::NotYetValid(1_740_672_089)
    ));
    // 1740672154 is validBefore: not valid at it (the challenge is made to outlive it)
    let late = Challenge::new(
        [3; 48],
        "/inference",
        None,
        Some(10_000),
        parse_address(payee),
        "p",
        std::slice::from_ref(&usdc),
        1_740_672_000_000,
        600_000,
    );
    assert!(matches!(
        refused(&ok, &late, 1_740_672_154_000),
        Refusal::Expired(1_740_672_154)
    ));
    // a tampered value no longer recovers to from
    let mut tampered = credential.clone();
    tampered["payload"]["authorization"]["value"] = json!("20000");
    let t = Credential::decode(&tampered).unwrap();
    assert!(matches!(
        refused(&t, &challenge(10_000, payee), now_ms),
        Refusal::Signature(_)
    ));
    // a network the challenge does not offer
    let mut other = credential.clone();
    other["accepted"]["network"] = json!("eip155:8453");
    let o = Credential::decode(&other).unwrap();
    assert!(matches!(
        refused(&o, &challenge(10_000, payee), now_ms),
        Refusal::Network(_)
    ));
    // the challenge's domain named "USD Coin": the payer signed under "USDC", and is told so
    let mut coin = usdc.clone();
    coin.name = "USD Coin".into();
    let ch = Challenge::new(
        [3; 48],
        "/inference",
        None,
        Some(10_000),
        parse_address(payee),
        "p",
        std::slice::from_ref(&coin),
        now_ms - 1000,
        60_000,
    );
    assert_eq!(
        refused(&ok, &ch, now_ms),
        Refusal::WrongDomainName {
            used: "USDC".into(),
            expected: "USD Coin".into()
        }
    );
    // a challenge whose accepted chain is 84532 under another id: signed for 84532
    let mut elsewhere = usdc.clone();
    elsewhere.chain_id = 8453;
    let ch = Challenge::new(
        [3; 48],
        "/inference",
        None,
        Some(10_000),
        parse_address(payee),
        "p",
        std::slice::from_ref(&elsewhere),
        now_ms - 1000,
        60_000,
    );
    let mut on_base = credential;
    on_base["accepted"]["network"] = json!("eip155:8453");
    let c = Credential::decode(&on_base).unwrap();
    assert_eq!(
        refused(&c, &ch, now_ms),
        Refusal::WrongChainId {
            used: 84532,
            expected: 8453
        }
    );
    // garbage
    assert!(matches!(
        Credential::decode(&json!("%%%")),
        Err(Refusal::Malformed(_))
    ));
    assert!(matches!(
        Credential::decode(&json!({"scheme": "exact"})),
        Err(Refusal::Malformed(_))
    ));
}

fn base64_of(v: &Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(v).unwrap())
}
