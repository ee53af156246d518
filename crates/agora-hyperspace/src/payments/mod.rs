//! The Micropayments primitive (`micropayments.*`), sans IO.
//!
//! Hyperspace spec: §6 "Micropayments Primitive" (PayChallenge,
//! PayCredential, PayChannel; the five methods; the HTTP 402 flow of §6.3; the streaming channel
//! of §6.4), §2.1 topic `hyperspace/settlements/{round}`, §8 −32002 "Budget Exceeded". Where the
//! spec is silent the shapes are x402's (Coinbase's HTTP 402 protocol: `PaymentRequirements`,
//! `PaymentPayload`, the "exact" EVM scheme over EIP-3009 `TransferWithAuthorization`) so that
//! x402 clients and wallets can pay a node; every choice is in `docs/hyperspace-wire.md`
//! "Micropayments".
//!
//! | module | owns |
//! |---|---|
//! | this one | [`Amount`]s: integers in an asset's atomic units, never floats |
//! | [`decimal`] | the spec's decimal amounts (`budget: 5.0`) and their exact conversion to and from atomic units |
//! | [`eip712`] | EIP-712 typed data (domains, `TransferWithAuthorization`, channel vouchers), digests, secp256k1 signing and recovery |
//! | [`assets`] | the assets a node accepts: USDC per chain with its EIP-712 domain, and points |
//! | [`challenge`] | `PayChallenge` (an x402 v2 `PaymentRequired` with HAP fields) |
//! | [`credential`] | `PayCredential` (x402 v1/v2 `PaymentPayload`; the points scheme signed with Ed25519), its checks and refusal reasons, receipts |
//! | [`channel`] | payment channels: cumulative vouchers with strictly increasing nonces, budget, close |
//! | [`params`] | parameters of the five methods |
//! | [`schema`] | what the five methods take and return, for the OpenRPC document |
//! | [`settlement`] | settlement rounds and the records gossiped on `hyperspace/settlements/{round}` |
//!
//! No clock and no randomness are read here: `now` (milliseconds or seconds, as named) and
//! random bytes are arguments.

pub mod assets;
pub mod challenge;
pub mod channel;
pub mod credential;
pub mod decimal;
pub mod eip712;
pub mod params;
pub mod schema;
pub mod settlement;

/// `micropayments.challenge`.
pub const CHALLENGE: &str = "micropayments.challenge";
/// `micropayments.verify`.
pub const VERIFY: &str = "micropayments.verify";
/// `micropayments.channel.open`.
pub const CHANNEL_OPEN: &str = "micropayments.channel.open";
/// `micropayments.channel.pay`.
pub const CHANNEL_PAY: &str = "micropayments.channel.pay";
/// `micropayments.channel.close`.
pub const CHANNEL_CLOSE: &str = "micropayments.channel.close";
/// Every `micropayments.*` method, in the order the node serves them.
pub const METHODS: [&str; 5] = [CHALLENGE, VERIFY, CHANNEL_OPEN, CHANNEL_PAY, CHANNEL_CLOSE];

use serde_json::Value;

/// An amount in an asset's atomic units (USDC: 6 decimals, so 0.003 USDC is 3000; points: 1).
/// On the wire an integer, or a string of decimal digits (x402 writes amounts as strings);
/// never a number with a fraction.
pub type Amount = u128;

/// The largest amount accepted on the wire: 2^96 − 1 atomic units (far beyond any supply of
/// USDC, and small enough that sums of a channel's payments cannot overflow).
pub const MAX_AMOUNT: Amount = (1 << 96) - 1;

/// Why an amount on the wire is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// A JSON number with a fraction or an exponent, or a negative one.
    #[error(
        "{0} must be an integer in the asset's atomic units (USDC has 6 decimals: 0.003 USDC is 3000), not {1}"
    )]
    NotAtomic(&'static str, String),
    /// Neither a number nor a string of digits.
    #[error("{0} must be an integer or a string of decimal digits")]
    Type(&'static str),
    /// Beyond [`MAX_AMOUNT`].
    #[error("{0} is larger than {MAX_AMOUNT} atomic units")]
    TooLarge(&'static str),
    /// A decimal amount that is not one: a sign, an exponent, other characters.
    #[error(
        "{0} must be a decimal amount (a JSON number or a string such as \"0.003\"; no sign, no exponent), not {1}"
    )]
    NotDecimal(&'static str, String),
    /// Neither a number nor a string.
    #[error("{0} must be a decimal amount: a JSON number or a decimal string")]
    DecimalType(&'static str),
    /// More decimals than the asset has.
    #[error(
        "{0}: {1} has more decimals than the asset's {2}, so it cannot be paid exactly (amounts are never rounded; {0}Atomic takes atomic units)"
    )]
    TooPrecise(&'static str, String, u32),
    /// The decimal field and its atomic twin both given.
    #[error("give {0} or {1}, not both")]
    Both(&'static str, &'static str),
}

/// Reads the amount `field` from `v`: a non-negative JSON integer or a string of 1–30 decimal
/// digits (no sign, no fraction), at most [`MAX_AMOUNT`].
pub fn parse_amount(field: &'static str, v: &Value) -> Result<Amount, AmountError> {
    let digits: String = match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                return Ok(Amount::from(u));
            }
            return Err(AmountError::NotAtomic(field, n.to_string()));
        }
        Value::String(s) => s.clone(),
        _ => return Err(AmountError::Type(field)),
    };
    if digits.is_empty() || digits.len() > 30 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AmountError::NotAtomic(field, format!("{digits:?}")));
    }
    let n: Amount = digits.parse().map_err(|_| AmountError::TooLarge(field))?;
    if n > MAX_AMOUNT {
        return Err(AmountError::TooLarge(field));
    }
    Ok(n)
}

/// An amount as JSON: a number when it fits JavaScript's safe integers (2^53 − 1), else a
/// string of digits.
pub fn amount_json(a: Amount) -> Value {
    const SAFE: Amount = (1 << 53) - 1;
    if a <= SAFE {
        Value::from(u64::try_from(a).unwrap_or(u64::MAX))
    } else {
        Value::String(a.to_string())
    }
}

/// Serde for [`Amount`] fields as strings of digits (`#[serde(with = "amount_serde")]`): JSON
/// numbers cannot carry every `u128`, and serde's buffering of tagged enums cannot carry any.
/// Reading takes an integer or a string of digits ([`parse_amount`]).
pub mod amount_serde {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the amount as a string of digits.
    pub fn serialize<S: Serializer>(a: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&a.to_string())
    }

    /// Reads an integer or a string of digits.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        super::parse_amount("amount", &v).map_err(serde::de::Error::custom)
    }

    /// The same for `Option<Amount>` (`null` or absent is `None`; pair it with
    /// `#[serde(default)]`).
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        /// Writes a string of digits, or `null`.
        #[allow(clippy::ref_option)] // the shape serde's `with` wants
        pub fn serialize<S: Serializer>(a: &Option<u128>, s: S) -> Result<S::Ok, S::Error> {
            match a {
                Some(a) => s.serialize_str(&a.to_string()),
                None => s.serialize_none(),
            }
        }

        /// Reads `null`, an integer or a string of digits.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u128>, D::Error> {
            let v = serde_json::Value::deserialize(d)?;
            if v.is_null() {
                return Ok(None);
            }
            super::super::parse_amount("amount", &v)
                .map(Some)
                .map_err(serde::de::Error::custom)
        }
    }
}

/// A price per use (a priced tool, spec §6): points, USDC atomic units, or both (the payer
/// chooses). At least one is set and positive ([`Price::check`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    /// In points.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "amount_serde::option"
    )]
    pub points: Option<Amount>,
    /// In USDC atomic units (6 decimals).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "amount_serde::option"
    )]
    pub usdc: Option<Amount>,
}

impl Price {
    /// At least one positive amount, none above [`MAX_AMOUNT`].
    pub fn check(&self) -> Result<(), String> {
        let ok = |a: Option<Amount>| a.is_none_or(|a| a <= MAX_AMOUNT);
        if !ok(self.points) || !ok(self.usdc) {
            return Err(format!("price is larger than {MAX_AMOUNT}"));
        }
        if self.points.unwrap_or(0) == 0 && self.usdc.unwrap_or(0) == 0 {
            return Err("price needs a positive points or usdc amount (atomic units)".into());
        }
        Ok(())
    }
}

/// Lower-case hex with `0x`.
pub fn hex0x(bytes: &[u8]) -> String {
    format!("0x{}", hex::encode(bytes))
}

/// Decodes hex (either case) with an optional `0x` of exactly `N` bytes.
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let h = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let mut out = [0u8; N];
    hex::decode_to_slice(h, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn amounts_are_integers_or_digit_strings() {
        assert_eq!(parse_amount("a", &json!(3000)), Ok(3000));
        assert_eq!(parse_amount("a", &json!("5000000")), Ok(5_000_000));
        assert!(matches!(
            parse_amount("a", &json!(0.003)),
            Err(AmountError::NotAtomic(..))
        ));
        assert!(matches!(
            parse_amount("a", &json!(-1)),
            Err(AmountError::NotAtomic(..))
        ));
        assert!(parse_amount("a", &json!("1e3")).is_err());
        assert!(parse_amount("a", &json!("")).is_err());
        assert!(parse_amount("a", &json!(" 1")).is_err());
        assert_eq!(
            parse_amount("a", &json!(MAX_AMOUNT.to_string())),
            Ok(MAX_AMOUNT)
        );
        assert_eq!(
            parse_amount("a", &json!((MAX_AMOUNT + 1).to_string())),
            Err(AmountError::TooLarge("a"))
        );
        assert_eq!(parse_amount("a", &json!(null)), Err(AmountError::Type("a")));
        assert_eq!(amount_json(3000), json!(3000));
        assert_eq!(amount_json(1 << 60), json!((1u128 << 60).to_string()));
    }

    #[test]
    fn hex_round_trips() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex0x(&b), "0x0001abff");
        assert_eq!(unhex::<4>("0x0001abff"), Some(b));
        assert_eq!(unhex::<4>("0001ABFF"), Some(b));
        assert_eq!(unhex::<4>("0x0001ab"), None);
        assert_eq!(unhex::<2>("zz00"), None);
    }

    #[test]
    fn a_sign_is_not_a_hex_digit() {
        // `u8::from_str_radix`, which decoded pairs before the `hex` crate, took "+a" as 0x0a.
        assert_eq!(unhex::<2>("+a+b"), None);
        assert_eq!(unhex::<2>("0x+a0b"), None);
    }
}
