//! Parameters of the five `micropayments.*` methods (spec §6.2), checked before anything runs;
//! every error names its field (−32602).

use serde_json::Value;

use super::assets::{USDC_DECIMALS, chain_id_of};
use super::channel::Currency;
use super::decimal;
use super::eip712::parse_address;
use super::{Amount, AmountError};
use crate::params::Problem;

/// Longest `memo` of a channel payment, in characters.
pub const MAX_MEMO: usize = 256;
/// Longest `resource` of a challenge, in bytes.
pub const MAX_RESOURCE: usize = 512;

/// An invalid parameter (−32602), naming it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamError(pub String);

fn object(p: &Value) -> Result<&serde_json::Map<String, Value>, ParamError> {
    match p {
        Value::Object(m) => Ok(m),
        Value::Null => Err(ParamError("params must be an object".into())),
        _ => Err(ParamError("params must be an object (by name)".into())),
    }
}

/// The amount `field` in whole units of an asset with `decimals` decimals, or `atomic` in its
/// atomic units ([`decimal::read`]).
fn amount(
    m: &serde_json::Map<String, Value>,
    field: &'static str,
    atomic: &'static str,
    decimals: u32,
) -> Result<Option<Amount>, ParamError> {
    decimal::read(m, field, atomic, decimals).map_err(|e: AmountError| ParamError(e.to_string()))
}

fn string<'a>(
    m: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ParamError> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ParamError(format!("{field} must be a string"))),
    }
}

fn required<'a>(m: &'a serde_json::Map<String, Value>, field: &str) -> Result<&'a str, ParamError> {
    string(m, field)?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ParamError(format!("{field} is required")))
}

/// Every required field of `method` that `p` lacks, at once (each a [`Problem`]; a field with
/// an atomic twin counts as given when either is): checked before the params are read, so a
/// caller learns all of them from one −32602.
#[must_use]
pub fn missing(method: &str, p: &Value) -> Vec<Problem> {
    let required: &[(&str, Option<&str>)] = match method {
        super::CHANNEL_OPEN => &[
            ("payee", None),
            ("budget", Some("budgetAtomic")),
            ("currency", None),
        ],
        super::CHANNEL_PAY if p.get("voucher").is_none() => {
            &[("channelId", None), ("amount", Some("amountAtomic"))]
        }
        super::CHANNEL_PAY | super::CHANNEL_CLOSE => &[("channelId", None)],
        super::VERIFY => &[("credential", None)],
        _ => &[],
    };
    let given = |k: &str| p.get(k).is_some_and(|v| !v.is_null());
    required
        .iter()
        .filter(|(field, twin)| !given(field) && !twin.is_some_and(given))
        .map(|(field, twin)| Problem {
            field: (*field).to_owned(),
            reason: match twin {
                Some(t) => format!("required (or {t})"),
                None => "required".to_owned(),
            },
            allowed: (*field == "currency").then(|| serde_json::json!(["USDC", "points"])),
        })
        .collect()
}

/// `micropayments.challenge(pricePoints, priceUsdc, payeeAddress)`, plus `resource`: `priceUsdc`
/// in USDC (`0.003`) or `priceUsdcAtomic` in its atomic units; `pricePoints` whole points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeParams {
    /// Price in points.
    pub price_points: Option<Amount>,
    /// Price in USDC atomic units.
    pub price_usdc: Option<Amount>,
    /// Where USDC goes; the node's wallet when absent.
    pub payee_address: Option<alloy_primitives::Address>,
    /// What is paid for; `micropayments.challenge` when absent.
    pub resource: Option<String>,
}

impl ChallengeParams {
    /// Reads and checks them: at least one positive price; `payeeAddress` an address.
    pub fn parse(p: &Value) -> Result<Self, ParamError> {
        let m = object(p)?;
        let price_points = amount(m, "pricePoints", "pricePointsAtomic", 0)?;
        let price_usdc = amount(m, "priceUsdc", "priceUsdcAtomic", USDC_DECIMALS)?;
        if price_points.unwrap_or(0) == 0 && price_usdc.unwrap_or(0) == 0 {
            return Err(ParamError(
                "pricePoints or priceUsdc must be positive (priceUsdc in USDC, e.g. 0.003)".into(),
            ));
        }
        let payee_address = string(m, "payeeAddress")?
            .map(|s| {
                parse_address(s).ok_or_else(|| {
                    ParamError(format!(
                        "payeeAddress {s:?} is not a 0x address (EIP-55 checksum when mixed case)"
                    ))
                })
            })
            .transpose()?;
        let resource = string(m, "resource")?.map(str::to_owned);
        if resource.as_ref().is_some_and(|r| r.len() > MAX_RESOURCE) {
            return Err(ParamError(format!(
                "resource is longer than {MAX_RESOURCE} bytes"
            )));
        }
        Ok(Self {
            price_points: price_points.filter(|&p| p > 0),
            price_usdc: price_usdc.filter(|&p| p > 0),
            payee_address,
            resource,
        })
    }
}

/// `micropayments.verify(credential)`: the credential (object or base64) is decoded by
/// [`super::credential::Credential::decode`], so that a malformed one is a refusal with a reason.
pub fn verify_credential(p: &Value) -> Result<&Value, ParamError> {
    object(p)?
        .get("credential")
        .filter(|c| !c.is_null())
        .ok_or_else(|| ParamError("credential is required".into()))
}

/// `micropayments.channel.open(payee, budget, currency)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenParams {
    /// The payee node's PeerId.
    pub payee: String,
    /// Atomic units of the currency, positive (`budget` in whole units on the wire, or
    /// `budgetAtomic`).
    pub budget: Amount,
    /// `USDC` (on `chainId` or `network`, else the node's first accepted chain) or `points`.
    pub currency: Currency,
}

impl OpenParams {
    /// Reads and checks them; `default_chain` is the chain of a USDC channel that names none.
    pub fn parse(p: &Value, default_chain: Option<u64>) -> Result<Self, ParamError> {
        let m = object(p)?;
        let payee = required(m, "payee")?;
        if crate::peer_id::public_key_of(payee).is_none() {
            return Err(ParamError(format!(
                "payee {payee:?} is not an Ed25519 PeerId"
            )));
        }
        let currency = match required(m, "currency")?.to_ascii_lowercase().as_str() {
            "points" => Currency::Points,
            "usdc" => {
                let chain = match (m.get("chainId"), string(m, "network")?) {
                    (Some(Value::Number(n)), _) => n.as_u64().filter(|&c| c > 0),
                    (None | Some(Value::Null), Some(net)) => chain_id_of(net),
                    (None | Some(Value::Null), None) => default_chain,
                    _ => None,
                };
                Currency::Usdc {
                    chain_id: chain.ok_or_else(|| {
                        ParamError("chainId or network names no accepted chain".into())
                    })?,
                }
            }
            other => {
                return Err(ParamError(format!(
                    "currency {other:?} is neither \"USDC\" nor \"points\""
                )));
            }
        };
        let budget = amount(m, "budget", "budgetAtomic", currency.decimals())?
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                ParamError("budget must be a positive amount of the currency (e.g. 5.0)".into())
            })?;
        Ok(Self {
            payee: payee.to_owned(),
            budget,
            currency,
        })
    }
}

/// `micropayments.channel.pay(channelId, amount, memo)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayParams {
    /// The channel.
    pub channel_id: String,
    /// Atomic units, positive (`amount` in whole units of the channel's currency on the wire, or
    /// `amountAtomic`): read by [`PayParams::amount`] once the channel is known.
    pub amount: PayAmount,
    /// Up to [`MAX_MEMO`] characters.
    pub memo: String,
}

/// A payment's amount as given: decimal whole units of the channel's currency (`amount`), known
/// only once the channel is, or atomic units (`amountAtomic`).
#[derive(Debug, Clone, PartialEq)]
pub enum PayAmount {
    /// `amount`: a JSON number or decimal string, its syntax already checked.
    Decimal(Value),
    /// `amountAtomic`.
    Atomic(Amount),
}

impl Eq for PayAmount {}

impl PayParams {
    /// Reads and checks them (the amount's precision is checked by [`PayParams::atomic`]).
    pub fn parse(p: &Value) -> Result<Self, ParamError> {
        let m = object(p)?;
        let channel_id = required(m, "channelId")?.to_owned();
        let given = |k: &str| m.get(k).filter(|v| !v.is_null());
        let amount = match (given("amount"), given("amountAtomic")) {
            (Some(_), Some(_)) => {
                return Err(ParamError(
                    AmountError::Both("amount", "amountAtomic").to_string(),
                ));
            }
            (Some(v), None) => {
                // The syntax now; the currency's decimals once the channel is known.
                decimal::check_syntax("amount", v).map_err(|e| ParamError(e.to_string()))?;
                PayAmount::Decimal(v.clone())
            }
            (None, Some(_)) => {
                PayAmount::Atomic(amount(m, "amount", "amountAtomic", 0)?.unwrap_or_default())
            }
            (None, None) => {
                return Err(ParamError(
                    "amount is required (in the channel's currency, e.g. 0.003)".into(),
                ));
            }
        };
        let memo = string(m, "memo")?.unwrap_or_default().to_owned();
        if memo.chars().count() > MAX_MEMO {
            return Err(ParamError(format!(
                "memo is longer than {MAX_MEMO} characters"
            )));
        }
        Ok(Self {
            channel_id,
            amount,
            memo,
        })
    }

    /// The amount in atomic units of a currency with `decimals` decimals; positive.
    pub fn atomic(&self, decimals: u32) -> Result<Amount, ParamError> {
        let a = match &self.amount {
            PayAmount::Decimal(v) => decimal::parse_decimal("amount", v, decimals)
                .map_err(|e| ParamError(e.to_string()))?,
            PayAmount::Atomic(a) => *a,
        };
        if a == 0 {
            return Err(ParamError("amount must be positive".into()));
        }
        Ok(a)
    }
}

/// `micropayments.channel.close(channelId)`: the channel id.
pub fn close_channel_id(p: &Value) -> Result<String, ParamError> {
    Ok(required(object(p)?, "channelId")?.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_missing_field_is_named_at_once() {
        let fields = |m: &str, p: Value| -> Vec<String> {
            missing(m, &p).into_iter().map(|p| p.field).collect()
        };
        assert_eq!(
            fields(super::super::CHANNEL_OPEN, json!({})),
            ["payee", "budget", "currency"]
        );
        assert_eq!(
            fields(super::super::CHANNEL_OPEN, json!({"budgetAtomic": "1"})),
            ["payee", "currency"]
        );
        assert_eq!(
            fields(super::super::CHANNEL_PAY, json!({})),
            ["channelId", "amount"]
        );
        assert!(
            fields(
                super::super::CHANNEL_PAY,
                json!({"channelId": "c", "voucher": {}})
            )
            .is_empty()
        );
        assert_eq!(
            missing(super::super::CHANNEL_OPEN, &json!({}))[2].allowed,
            Some(json!(["USDC", "points"]))
        );
    }

    #[test]
    fn challenge_params() {
        let c = ChallengeParams::parse(&json!({"pricePoints": 10, "priceUsdc": 0.003})).unwrap();
        assert_eq!((c.price_points, c.price_usdc), (Some(10), Some(3000)));
        let c = ChallengeParams::parse(&json!({"priceUsdcAtomic": "3000"})).unwrap();
        assert_eq!((c.price_points, c.price_usdc), (None, Some(3000)));
        assert!(
            ChallengeParams::parse(&json!({}))
                .unwrap_err()
                .0
                .contains("pricePoints")
        );
        assert!(
            ChallengeParams::parse(&json!({"priceUsdc": 0.0000001}))
                .unwrap_err()
                .0
                .contains("more decimals than the asset's 6")
        );
        assert!(
            ChallengeParams::parse(&json!({"priceUsdc": 1, "payeeAddress": "0x12"}))
                .unwrap_err()
                .0
                .contains("payeeAddress")
        );
    }

    #[test]
    fn channel_params() {
        let peer = crate::peer_id_of(&[7; 32]);
        let o = OpenParams::parse(
            &json!({"payee": peer, "budget": 5.0, "currency": "USDC"}),
            Some(84532),
        )
        .unwrap();
        assert_eq!(o.currency, Currency::Usdc { chain_id: 84532 });
        assert_eq!(o.budget, 5_000_000);
        let o = OpenParams::parse(
            &json!({"payee": peer, "budget": 5, "currency": "points"}),
            None,
        )
        .unwrap();
        assert_eq!(o.currency, Currency::Points);
        let o = OpenParams::parse(
            &json!({"payee": peer, "budget": 5, "currency": "usdc", "network": "eip155:8453"}),
            None,
        )
        .unwrap();
        assert_eq!(o.currency, Currency::Usdc { chain_id: 8453 });
        assert!(
            OpenParams::parse(
                &json!({"payee": "x", "budget": 5, "currency": "points"}),
                None
            )
            .unwrap_err()
            .0
            .contains("payee")
        );
        assert!(
            OpenParams::parse(
                &json!({"payee": peer, "budget": 5.5, "currency": "points"}),
                None
            )
            .unwrap_err()
            .0
            .contains("budget")
        );
        assert!(
            OpenParams::parse(
                &json!({"payee": peer, "budget": 5, "currency": "eur"}),
                None
            )
            .unwrap_err()
            .0
            .contains("currency")
        );
        assert!(
            OpenParams::parse(
                &json!({"payee": peer, "budget": 5, "currency": "USDC"}),
                None
            )
            .unwrap_err()
            .0
            .contains("chain")
        );
        let p =
            PayParams::parse(&json!({"channelId": "0x1", "amount": 0.003, "memo": "42 tokens"}))
                .unwrap();
        assert_eq!(p.atomic(6), Ok(3000));
        let p = PayParams::parse(&json!({"channelId": "0x1", "amountAtomic": "3000"})).unwrap();
        assert_eq!(p.atomic(6), Ok(3000));
        assert!(
            PayParams::parse(&json!({"channelId": "0x1", "amount": 0.5}))
                .unwrap()
                .atomic(0)
                .unwrap_err()
                .0
                .contains("decimals")
        );
        assert!(
            PayParams::parse(&json!({"channelId": "0x1", "amount": "-1"}))
                .unwrap_err()
                .0
                .contains("amount")
        );
        assert!(
            PayParams::parse(&json!({"channelId": "0x1", "amount": 0}))
                .unwrap()
                .atomic(6)
                .unwrap_err()
                .0
                .contains("amount")
        );
        assert!(
            PayParams::parse(&json!({"channelId": "0x1", "amount": 1, "memo": "m".repeat(257)}))
                .unwrap_err()
                .0
                .contains("memo")
        );
        assert_eq!(
            close_channel_id(&json!({"channelId": "0xab"})).unwrap(),
            "0xab"
        );
        assert!(verify_credential(&json!({})).is_err());
    }
}
