//! `guard_schema`: arbitrary UTF-8 as a `guard.validate` call, `{"schema": …, "data": …}` (or any
//! JSON, used as the schema with `null` data), through the limit checker and the validation.
//!
//! Properties checked: `guard::schema_cost::check` never panics; when it accepts, the steps it
//! bounds the validation to are within the limit and so is the nesting; `guard::validate` then
//! never panics, never overflows the stack of the fuzzer's main thread (8 MiB by default on
//! Linux, as the node's workers have), and reports at most `max_errors` errors, each field at most
//! `max_error_field_bytes` bytes plus the `…` that marks a cut.
#![no_main]

mod common;

use agora_hyperspace::guard::{ValidateLimits, schema_cost, validate};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(input) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let (schema, instance) = match &input {
        Value::Object(call) if call.contains_key("schema") => (
            call.get("schema").cloned().unwrap_or(Value::Null),
            call.get("data").cloned().unwrap_or(Value::Null),
        ),
        other => (other.clone(), Value::Null),
    };
    // Small enough for the fuzzer to reach every limit.
    let limits = ValidateLimits {
        max_cost: 200_000,
        max_nesting: 128,
        ..ValidateLimits::default()
    };
    let Ok(estimate) = schema_cost::check(&instance, &schema, &limits) else {
        return;
    };
    assert!(
        estimate.total_steps <= limits.max_cost && estimate.nesting <= limits.max_nesting,
        "{estimate:?} for {}",
        common::clip(text, 300)
    );
    let Ok(result) = validate(&instance, &schema, &limits) else {
        return;
    };
    let errors = result.errors.unwrap_or_default();
    assert!(errors.len() <= limits.max_errors);
    let cap = limits.max_error_field_bytes + '…'.len_utf8();
    for error in &errors {
        assert!(
            error.message.len() <= cap
                && error.instance_path.len() <= cap
                && error.schema_path.len() <= cap,
            "{error:?}"
        );
    }
});
