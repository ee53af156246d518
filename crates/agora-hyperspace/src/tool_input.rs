//! A tool's declared input schema, enforced before its provider sees a call (spec §4.3: a
//! tool's `schema` is `{input, output}` JSON Schemas, Example 1): `tool.invoke`'s `params` are
//! checked against `schema.input` with the Guard's bounded validator
//! ([`crate::guard::validate::validate`], the same cost limits as `guard.validate`), and a call that does
//! not match is −32602 with every schema error, so that no provider has to defend itself
//! against input its schema already excludes.
//!
//! Which schema: `schema.input` when it is an object; else `schema` itself when it reads as a
//! JSON Schema (it has `type`, `properties`, `required`, `$schema`, `$ref`, `allOf`, `anyOf`
//! or `oneOf` at its top: tools registered with a bare input schema); else nothing is enforced.
//! A schema that cannot be compiled (invalid, too costly, referring outside itself) is not
//! enforced either: it came from a provider, possibly of another implementation, and refusing
//! every call of its tool would punish the caller for it.

use serde_json::{Value, json};

use crate::guard::schema_cost::ValidateLimits;
use crate::jsonrpc::RpcError;
use crate::params::invalid_params;

/// Top-level keywords that make a bare `schema` an input schema.
const SCHEMA_KEYWORDS: [&str; 8] = [
    "type",
    "properties",
    "required",
    "$schema",
    "$ref",
    "allOf",
    "anyOf",
    "oneOf",
];

/// The input schema of a tool whose `schema` is `schema`, if it declares one.
pub fn input_schema(schema: &Value) -> Option<&Value> {
    match schema.get("input") {
        Some(input) if input.is_object() => Some(input),
        _ if SCHEMA_KEYWORDS.iter().any(|k| schema.get(k).is_some()) => Some(schema),
        _ => None,
    }
}

/// Checks a call's `params` against the tool's input schema (CPU-bound up to the validator's
/// step limit: call it off any task that answers other calls).
///
/// # Errors
///
/// −32602 `params: does not match the tool's input schema: <first error>` with `data: {field:
/// "params", errors: [{field, reason, keyword, schemaPath}]}` (`field` is `params` followed by
/// the JSON Pointer of the failing part, e.g. `params/query`). Absent params are checked as
/// `{}`.
pub fn check(params: &Value, input_schema: &Value) -> Result<(), RpcError> {
    // Absent params are no arguments.
    let empty = Value::Object(serde_json::Map::new());
    let params = if params.is_null() { &empty } else { params };
    let Ok(result) =
        crate::guard::validate::validate(params, input_schema, &ValidateLimits::default())
    else {
        return Ok(());
    };
    if result.valid {
        return Ok(());
    }
    let errors = result.errors.unwrap_or_default();
    let first = errors
        .first()
        .map_or_else(String::new, |e| format!(": {}", e.message));
    let listed: Vec<Value> = errors
        .iter()
        .map(|e| {
            json!({
                "field": format!("params{}", e.instance_path),
                "reason": e.message,
                "keyword": e.keyword,
                "schemaPath": e.schema_path,
            })
        })
        .collect();
    Err(invalid_params(
        format!("params: does not match the tool's input schema{first}"),
        None,
    )
    .with_data(json!({ "field": "params", "errors": listed })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_schema_is_schema_input_or_a_bare_schema() {
        let spec = json!({"input": {"type": "object"}, "output": {"type": "object"}});
        assert_eq!(input_schema(&spec), Some(&json!({"type": "object"})));
        let bare = json!({"type": "object", "properties": {}});
        assert_eq!(input_schema(&bare), Some(&bare));
        assert_eq!(input_schema(&json!({"note": "free-form"})), None);
        assert_eq!(input_schema(&json!({"input": "text"})), None);
    }

    #[test]
    fn params_that_do_not_match_are_refused_with_every_error() {
        let schema = json!({"type": "object", "required": ["query", "limit"],
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}});
        assert!(check(&json!({"query": "q", "limit": 3}), &schema).is_ok());
        let e = check(&json!({"query": 7}), &schema).unwrap_err();
        assert_eq!(e.code.0, -32602);
        let data = e.data.unwrap();
        assert_eq!(data["field"], "params");
        let fields: Vec<&str> = data["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["field"].as_str().unwrap())
            .collect();
        assert!(fields.contains(&"params/query"), "{data}");
        assert!(fields.contains(&"params"), "the missing limit: {data}");
        let e = check(&json!("not-an-object"), &schema).unwrap_err();
        assert!(e.message.contains("input schema"), "{}", e.message);
    }

    #[test]
    fn a_schema_that_cannot_be_compiled_is_not_enforced() {
        let remote = json!({"$ref": "#/$defs/missing"});
        assert!(check(&json!(1), &remote).is_ok());
    }
}
