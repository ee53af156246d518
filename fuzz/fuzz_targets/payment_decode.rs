//! `payment_decode`: arbitrary bytes as what the Micropayments primitive reads from outside
//! (`agora_hyperspace::payments`): a credential (JSON, or base64 of it as an `X-Payment`
//! header carries it), a channel voucher, a settlement record, and the params of the five
//! methods.
//!
//! Properties checked: nothing panics; a decoded credential checks against a challenge without
//! panicking and, when accepted, pays at least the price to the payee within its window; a
//! decoded voucher is accepted by a channel only with the next nonce, a positive amount and a
//! total within the budget, and a refused one changes nothing; a record's check never panics.
#![no_main]

use agora_hyperspace::payments::assets::default_usdc;
use agora_hyperspace::payments::challenge::Challenge;
use agora_hyperspace::payments::channel::{Channel, Currency, Voucher};
use agora_hyperspace::payments::credential::{Credential, check};
use agora_hyperspace::payments::params::{ChallengeParams, OpenParams, PayParams, close_channel_id};
use agora_hyperspace::payments::settlement::Record;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let payee = agora_hyperspace::payments::eip712::parse_address(
        "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    );
    let now_ms = 1_740_672_100_000;
    let challenge = Challenge::new(
        [7; 48],
        "/pay/tools/t/invoke",
        Some(5),
        Some(10_000),
        payee,
        "12D3KooWpayee",
        &default_usdc(),
        now_ms - 1_000,
        60_000,
    );
    for decoded in [Credential::decode(&value), Credential::decode_base64(text)] {
        if let Ok(cred) = decoded {
            let _ = cred.to_json();
            let _ = cred.receipt_id();
            if let Ok(v) = check(&cred, &challenge, now_ms, |_| None) {
                assert!(v.amount >= 5);
                let now_s = now_ms / 1000;
                let (after, before) = match &cred.payer {
                    agora_hyperspace::payments::credential::Payer::Evm(a) => (a.valid_after, a.valid_before),
                    agora_hyperspace::payments::credential::Payer::Points(p) => (p.valid_after, p.valid_before),
                };
                assert!(after <= now_s && now_s < before);
            }
        }
    }
    if let Ok(v) = serde_json::from_value::<Voucher>(value.clone()) {
        let mut ch = Channel::open("p", "pp", "q", Currency::Points, 1_000, [1; 16], 0);
        let before = ch.clone();
        match ch.accept(&v) {
            Ok(()) => {
                assert_eq!(ch.nonce, 1);
                assert!(ch.spent > 0 && ch.spent <= ch.budget);
            }
            Err(_) => assert_eq!(ch, before),
        }
        let _ = ch.check_signature(&v, |_| None);
    }
    if let Ok(r) = serde_json::from_value::<Record>(value.clone()) {
        let _ = r.check(|_| None);
        let _ = r.id();
    }
    let _ = ChallengeParams::parse(&value);
    let _ = OpenParams::parse(&value, Some(84532));
    if let Ok(p) = PayParams::parse(&value) {
        // A decimal amount: exact atomic units for USDC and for points, or a refusal; never 0.
        for decimals in [6, 0] {
            if let Ok(a) = p.atomic(decimals) {
                assert!(a > 0);
            }
        }
    }
    let _ = agora_hyperspace::payments::params::missing(
        agora_hyperspace::payments::CHANNEL_OPEN,
        &value,
    );
    let _ = close_channel_id(&value);
});
