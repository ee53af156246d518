//! Helpers every primitive's dispatcher shares (Hyperspace spec §2.2 "JSON-RPC 2.0 Transport",
//! §8 "Error Codes"): decoding params given by name or by position ([`parse_params`]), the −32602
//! "Invalid params" and −32003 capacity errors, text checks, and result serialization.

use std::io;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::jsonrpc::{RpcCode, RpcError};

/// Decodes JSON-RPC params into `T`: an object as is, an array positionally by `names`, absent
/// (`null`) as `{}`. Unknown members are ignored by `T`'s derive. Errors are −32602 naming the
/// field.
pub fn parse_params<T: DeserializeOwned>(params: &Value, names: &[&str]) -> Result<T, RpcError> {
    let converted;
    let source = match params {
        Value::Object(_) => params,
        Value::Null => {
            converted = Value::Object(Map::new());
            &converted
        }
        Value::Array(items) => {
            if items.len() > names.len() {
                return Err(invalid_params(
                    format!(
                        "expected at most {} positional params, got {}",
                        names.len(),
                        items.len()
                    ),
                    None,
                ));
            }
            converted = Value::Object(
                names
                    .iter()
                    .zip(items)
                    .map(|(name, value)| ((*name).to_owned(), value.clone()))
                    .collect(),
            );
            &converted
        }
        _ => {
            return Err(invalid_params("params must be an object or an array", None));
        }
    };
    serde_path_to_error::deserialize(source).map_err(|error| {
        let path = error.path().to_string();
        let reason = error.into_inner().to_string();
        let field = if path.is_empty() || path == "." {
            missing_field_name(&reason)
        } else {
            Some(path)
        };
        match field {
            Some(field) => invalid_params(format!("{field}: {reason}"), Some(&field)),
            None => invalid_params(reason, None),
        }
    })
}

/// The field name in serde's "missing field `x`" message.
fn missing_field_name(reason: &str) -> Option<String> {
    let rest = reason.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_owned())
}

/// Checks a text param: not blank, at most `max` bytes; else −32602 naming `field`.
pub(crate) fn text(value: &str, field: &str, max: usize) -> Result<(), RpcError> {
    if value.trim().is_empty() {
        return Err(invalid_params(
            format!("{field}: must not be blank"),
            Some(field),
        ));
    }
    if value.len() > max {
        return Err(invalid_params(
            format!("{field}: {} bytes, at most {max}", value.len()),
            Some(field),
        ));
    }
    Ok(())
}

/// −32602 with message "Invalid params: {detail}" and `data: {"field": …}` when a field is known.
pub(crate) fn invalid_params(detail: impl AsRef<str>, field: Option<&str>) -> RpcError {
    let error =
        RpcError::invalid_params().with_message(format!("Invalid params: {}", detail.as_ref()));
    match field {
        Some(field) => error.with_data(json!({ "field": field })),
        None => error,
    }
}

/// −32602 when `text` is longer than `max` bytes.
pub(crate) fn check_len(field: &str, text: &str, max: usize) -> Result<(), RpcError> {
    if text.len() > max {
        return Err(invalid_params(
            format!("{field}: longer than {max} bytes"),
            Some(field),
        ));
    }
    Ok(())
}

/// Serializes a result; the result types cannot fail, but a failure is −32603, not a panic.
pub(crate) fn to_result<T: Serialize>(value: &T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|_| RpcError::internal_error())
}

/// −32003 "Rate Limited" for a full store.
pub(crate) fn capacity_error(what: &str, limit: usize) -> RpcError {
    RpcError::from_code(RpcCode::RATE_LIMITED).with_data(json!({
        "reason": format!("too many {what}"),
        "limit": limit,
    }))
}

/// The number of bytes of `value`'s compact JSON text.
pub(crate) fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a Value to an infallible writer cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}
