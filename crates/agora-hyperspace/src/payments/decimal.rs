//! The spec's decimal amounts (§6.2, §6.4: `budget: 5.0`, `channel.pay(0.003, …)`,
//! `{totalSpent: 0.006, refund: 4.994}`) and their exact conversion to an asset's atomic units
//! ([`Amount`]), both ways.
//!
//! In: a JSON number (`5.0`, `0.003`, `5`) or a decimal string (`"0.003"`), no sign, no exponent;
//! a value with more significant decimals than the asset has (USDC 6, points 0) is refused with
//! the reason, never rounded. A JSON number is read through its shortest round-trip text (the
//! workspace's serde_json parses with `float_roundtrip`), so `0.003` is exactly 3000 USDC atomic
//! units, as written. Out: a JSON number whose text is the exact decimal when one exists
//! (`0.006`), else the decimal string; the atomic value always travels beside it as a string of
//! digits under `<name>Atomic` ([`put`]).
//!
//! Kept here rather than taken from a decimal crate: the rule is the protocol's own (refuse
//! excess precision, never round, no exponents, the atomic twin), and it is 60 lines of text
//! handling; `rust_decimal` rounds at 28 digits and accepts exponents.

use serde_json::{Map, Value};

use super::{Amount, AmountError, MAX_AMOUNT, parse_amount};

/// The name of `field`'s atomic twin: `budget` → `budgetAtomic`.
pub fn atomic_name(field: &str) -> String {
    format!("{field}Atomic")
}

/// Reads the decimal amount `field` (in whole units of an asset with `decimals` decimals) and
/// converts it exactly to atomic units.
pub fn parse_decimal(field: &'static str, v: &Value, decimals: u32) -> Result<Amount, AmountError> {
    let (text, whole, fraction) = split(field, v)?;
    let places = usize::try_from(decimals).unwrap_or(usize::MAX);
    if fraction.len() > places {
        return Err(AmountError::TooPrecise(field, text, decimals));
    }
    let scaled = format!("{whole}{fraction}{}", "0".repeat(places - fraction.len()));
    // Leading zeros cannot overflow the parse; too many digits can (too large).
    let n: Amount = scaled.parse().map_err(|_| AmountError::TooLarge(field))?;
    if n > MAX_AMOUNT {
        return Err(AmountError::TooLarge(field));
    }
    Ok(n)
}

/// Checks that `v` is a decimal amount, before the asset (its decimals) is known.
pub fn check_syntax(field: &'static str, v: &Value) -> Result<(), AmountError> {
    split(field, v).map(|_| ())
}

/// `v`'s text, and its whole and fraction digits (the fraction without trailing zeros).
fn split(field: &'static str, v: &Value) -> Result<(String, String, String), AmountError> {
    let text = match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.to_string()
            } else if let Some(f) = n.as_f64().filter(|f| f.is_finite() && *f >= 0.0) {
                // Display writes the shortest text that reads back as the same f64, without an
                // exponent: the number as the client wrote it (to 15 significant digits).
                f.to_string()
            } else {
                return Err(AmountError::NotDecimal(field, n.to_string()));
            }
        }
        Value::String(s) => s.clone(),
        _ => return Err(AmountError::DecimalType(field)),
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || text.len() > 80 {
        return Err(AmountError::NotDecimal(field, format!("{text:?}")));
    }
    let (whole, fraction) = (whole.to_owned(), fraction.trim_end_matches('0').to_owned());
    Ok((text, whole, fraction))
}

/// `a` atomic units as a decimal string of whole units: `4994000` at 6 decimals is `"4.994"`.
pub fn decimal_string(a: Amount, decimals: u32) -> String {
    let ten = 10u128.pow(decimals);
    let (whole, fraction) = (a / ten, a % ten);
    if fraction == 0 {
        return whole.to_string();
    }
    let width = usize::try_from(decimals).unwrap_or(0);
    let fraction = format!("{fraction:0width$}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

/// `a` as the spec writes amounts: a JSON number when its text is exactly the decimal
/// (`0.006`, `5`) and a JavaScript client reads it back as the same value, else the decimal
/// string (beyond 2^53 − 1 whole, or ~15 significant digits).
pub fn decimal_json(a: Amount, decimals: u32) -> Value {
    const SAFE: u64 = (1 << 53) - 1;
    let text = decimal_string(a, decimals);
    if !text.contains('.') {
        return match text.parse::<u64>() {
            Ok(u) if u <= SAFE => Value::from(u),
            _ => Value::String(text),
        };
    }
    match text.parse::<f64>().ok().filter(|f| f.to_string() == text) {
        Some(f) => serde_json::Number::from_f64(f).map_or(Value::String(text), Value::Number),
        None => Value::String(text),
    }
}

/// Writes `field` (decimal, [`decimal_json`]) and `<field>Atomic` (digits) into `m`.
pub fn put(m: &mut Map<String, Value>, field: &str, a: Amount, decimals: u32) {
    m.insert(field.to_owned(), decimal_json(a, decimals));
    m.insert(atomic_name(field), Value::String(a.to_string()));
}

/// Reads an amount given either as `field` (decimal, whole units) or as `<field>Atomic`
/// (atomic units: an integer or a string of digits); `None` when neither is there, an error when
/// both are.
pub fn read(
    m: &Map<String, Value>,
    field: &'static str,
    atomic: &'static str,
    decimals: u32,
) -> Result<Option<Amount>, AmountError> {
    let present = |k: &str| m.get(k).filter(|v| !v.is_null());
    match (present(field), present(atomic)) {
        (Some(_), Some(_)) => Err(AmountError::Both(field, atomic)),
        (Some(v), None) => parse_decimal(field, v, decimals).map(Some),
        (None, Some(v)) => parse_amount(atomic, v).map(Some),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_spec_amounts_convert_exactly() {
        assert_eq!(parse_decimal("budget", &json!(5.0), 6), Ok(5_000_000));
        assert_eq!(parse_decimal("amount", &json!(0.003), 6), Ok(3000));
        assert_eq!(parse_decimal("amount", &json!("0.003"), 6), Ok(3000));
        assert_eq!(parse_decimal("amount", &json!(5), 6), Ok(5_000_000));
        assert_eq!(
            parse_decimal("amount", &json!("5.000000000"), 6),
            Ok(5_000_000)
        );
        assert_eq!(parse_decimal("amount", &json!(0.000001), 6), Ok(1));
        assert_eq!(parse_decimal("amount", &json!(0.1), 6), Ok(100_000));
        assert_eq!(
            parse_decimal("amount", &json!(1234567.891011), 6),
            Ok(1_234_567_891_011)
        );
        assert_eq!(parse_decimal("p", &json!(12), 0), Ok(12));
        assert_eq!(parse_decimal("p", &json!("0"), 0), Ok(0));
    }

    #[test]
    fn what_is_not_an_amount_is_refused_with_the_reason() {
        let e = parse_decimal("amount", &json!(0.0000001), 6).unwrap_err();
        assert_eq!(e, AmountError::TooPrecise("amount", "0.0000001".into(), 6));
        assert!(e.to_string().contains("amountAtomic"), "{e}");
        assert!(matches!(
            parse_decimal("p", &json!(1.5), 0),
            Err(AmountError::TooPrecise(..))
        ));
        for bad in [
            json!(-1),
            json!(-0.5),
            json!("1e3"),
            json!(""),
            json!("."),
            json!(" 1"),
            json!("+1"),
            json!("1.2.3"),
            json!(".5"),
        ] {
            assert!(
                matches!(
                    parse_decimal("a", &bad, 6),
                    Err(AmountError::NotDecimal(..))
                ),
                "{bad}"
            );
        }
        assert_eq!(
            parse_decimal("a", &json!(null), 6),
            Err(AmountError::DecimalType("a"))
        );
        assert_eq!(
            parse_decimal("a", &json!(1e30), 6),
            Err(AmountError::TooLarge("a"))
        );
    }

    #[test]
    fn amounts_go_out_as_the_spec_writes_them() {
        assert_eq!(decimal_json(6000, 6), json!(0.006));
        assert_eq!(decimal_json(4_994_000, 6), json!(4.994));
        assert_eq!(decimal_json(5_000_000, 6), json!(5));
        assert_eq!(decimal_json(0, 6), json!(0));
        assert_eq!(decimal_json(12, 0), json!(12));
        assert_eq!(
            serde_json::to_string(&decimal_json(4_994_000, 6)).unwrap(),
            "4.994"
        );
        // Beyond what a double carries exactly: the decimal string.
        assert_eq!(
            decimal_json(MAX_AMOUNT, 6),
            json!(decimal_string(MAX_AMOUNT, 6))
        );
        let mut m = Map::new();
        put(&mut m, "refund", 4_994_000, 6);
        assert_eq!(
            Value::Object(m),
            json!({"refund": 4.994, "refundAtomic": "4994000"})
        );
    }

    #[test]
    fn either_the_decimal_or_the_atomic_field() {
        let m = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(
            read(&m(json!({"budget": 5.0})), "budget", "budgetAtomic", 6),
            Ok(Some(5_000_000))
        );
        assert_eq!(
            read(
                &m(json!({"budgetAtomic": "7"})),
                "budget",
                "budgetAtomic",
                6
            ),
            Ok(Some(7))
        );
        assert_eq!(
            read(
                &m(json!({"budgetAtomic": 0.5})),
                "budget",
                "budgetAtomic",
                6
            )
            .unwrap_err(),
            AmountError::NotAtomic("budgetAtomic", "0.5".into())
        );
        assert_eq!(read(&m(json!({})), "budget", "budgetAtomic", 6), Ok(None));
        assert_eq!(
            read(
                &m(json!({"budget": 1, "budgetAtomic": 1})),
                "budget",
                "budgetAtomic",
                6
            ),
            Err(AmountError::Both("budget", "budgetAtomic"))
        );
    }

    proptest! {
        #[test]
        fn decimal_text_round_trips(a in 0u128..=MAX_AMOUNT, decimals in 0u32..=18) {
            let text = decimal_string(a, decimals);
            prop_assert_eq!(parse_decimal("a", &Value::String(text), decimals), Ok(a));
            prop_assert_eq!(parse_decimal("a", &decimal_json(a, decimals), decimals), Ok(a));
        }

        #[test]
        fn usdc_numbers_with_six_decimals_are_exact(whole in 0u64..10_000_000, micro in 0u32..1_000_000) {
            let text = format!("{whole}.{micro:06}");
            let v: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(
                parse_decimal("a", &v, 6),
                Ok(u128::from(whole) * 1_000_000 + u128::from(micro))
            );
        }
    }
}
