//! `guard.validate` (Hyperspace spec §4.2): JSON Schema validation of `data` against `schema`,
//! offline, with the cost limits of [`schema_cost`] checked first and the
//! errors it reports bounded in count and bytes.
//!
//! # Limits ([`ValidateLimits`], defaults)
//!
//! `guard.validate` is the one Guard call whose work a client controls by more than its size: a
//! 1.4 KB schema can make `jsonschema` apply 2²² subschemas and collect as many errors (measured:
//! 23 s and 6.5 GB). [`schema_cost::check`] refuses such calls before compiling: sizes, counts,
//! and an upper bound of the steps the validation can take (its module docs say how it is
//! computed). Every refusal is −32602 `Invalid params: schema: …` (or `data: …`) with
//! `data: {"field": "schema" | "data", "limit": <name>, "max": <limit>}`.
//!
//! | limit (`data.limit`) | default | reasoning |
//! |---|---|---|
//! | `schemaBytes`: `schema`, compact JSON | 64 KiB | tool input schemas are a few KiB; large generated ones (OpenAPI bundles) stay under 50 KiB |
//! | `schemaDepth`: nesting of arrays and objects in `schema` | 64 | about 30 levels of nested subschemas; keeps compiling within any thread's stack |
//! | `subschemas` | 2048 | a 64 KiB schema of small subschemas has about this many |
//! | `refs`: `$ref` + `$dynamicRef` + `$recursiveRef` | 512 | generated schemas use one per property at most |
//! | `patterns`: `pattern` + `patternProperties` keys | 128 | each is compiled (up to the regex limits below); real schemas have a handful |
//! | `patternBytes`: one pattern | 1024 | real patterns (e-mail, dates, ids) are under 200 bytes |
//! | compiled regex / its lazy DFA cache | 256 KiB / 256 KiB | `regex` `size_limit` / `dfa_size_limit`: a larger pattern is −32602 (as an invalid schema); 128 patterns stay under 64 MiB |
//! | `dataBytes`: `data`, compact JSON | 512 KiB | half the JSON-RPC message limit |
//! | `dataDepth`: nesting of arrays and objects in `data` | 64 | |
//! | `unevaluatedWalk`: subschemas walked to compile `unevaluatedProperties`/`unevaluatedItems` | 2048 | `jsonschema` compiles these keywords by walking every subschema they reach in place (`$ref`, `allOf`, `anyOf`, `oneOf`, `if`/`then`/`else`, `dependentSchemas`) once per path, whatever the data: a 14-level doubling chain under one took 13 s to compile; 2048 paths compile in about 40 ms |
//! | `nesting`: subschemas applied within each other | 512 | how deep `jsonschema` recurses: about 1 KiB of stack each, so 0.5 MiB (the worker threads have 8 MiB); a 120-deep array against a 10-step `$ref` chain used to overflow a 2 MiB stack and abort the process |
//! | `steps`: upper bound of the validation and of collecting its errors | 10 000 000 | a step is some 10 ns and at most 6 bytes of error memory (measured): at most about 0.1–0.2 s and 60 MiB; 1,000 records of 10 typed fields take 1.6 million |
//! | errors reported | 32 | the rest are not reported (`valid` is still `false`) |
//! | one error field (`message`, `instancePath`, `schemaPath`) | 256 bytes | cut at a character boundary, `…` appended; a message quoting a huge value is not formatted past it |
//! | all reported errors | 16 KiB | errors past it are not reported (the first one always is) |
//!
//! A reference that leaves the schema (a remote URL or a meta-schema) and references that loop
//! without moving into the data (`a = allOf[b]`, `b = allOf[a]`; JSON Schema leaves them
//! undefined) are −32602 with `data: {"field": "schema"}`, as any invalid schema.

use serde_json::Value;

use super::schema_cost::{self, ValidateLimits};
use super::{SchemaError, ValidateResult};
use crate::jsonrpc::RpcError;
use crate::params::invalid_params;

/// `guard.validate`: checks `data` and `schema` against `limits` ([`schema_cost::check`]), then
/// compiles `schema` offline (Draft 2020-12 by default, formats asserted, linear-time patterns of
/// bounded size) and reports at most `limits.max_errors` failures, each field at most
/// `limits.max_error_field_bytes` and all of them at most `limits.max_errors_bytes`.
///
/// # Errors
///
/// −32602 when a limit is exceeded, when `schema` is not a valid schema, or when it references
/// anything outside itself.
pub fn validate(
    data: &Value,
    schema: &Value,
    limits: &ValidateLimits,
) -> Result<ValidateResult, RpcError> {
    schema_cost::check(data, schema, limits)?;
    let patterns = jsonschema::PatternOptions::regex()
        .size_limit(limits.max_regex_bytes)
        .dfa_size_limit(limits.max_regex_cache_bytes);
    let validator = jsonschema::options()
        .offline()
        .should_validate_formats(true)
        .with_pattern_options(patterns)
        .build(schema)
        .map_err(|error| {
            let mut message = String::new();
            bounded_display(&mut message, &error, limits.max_error_field_bytes);
            invalid_params(format!("schema: {message}"), Some("schema"))
        })?;
    if validator.is_valid(data) {
        return Ok(ValidateResult {
            valid: true,
            errors: None,
        });
    }
    let mut errors = Vec::new();
    let mut bytes = 0usize;
    for error in validator.iter_errors(data).take(limits.max_errors) {
        let field = limits.max_error_field_bytes;
        let mut reported = SchemaError {
            instance_path: String::new(),
            schema_path: String::new(),
            keyword: String::new(),
            message: String::new(),
        };
        bounded_display(&mut reported.instance_path, error.instance_path(), field);
        bounded_display(&mut reported.schema_path, error.schema_path(), field);
        bounded_display(&mut reported.keyword, &error.kind().keyword(), field);
        bounded_display(&mut reported.message, &error, field);
        bytes = bytes.saturating_add(
            reported.instance_path.len()
                + reported.schema_path.len()
                + reported.keyword.len()
                + reported.message.len(),
        );
        if bytes > limits.max_errors_bytes && !errors.is_empty() {
            break;
        }
        errors.push(reported);
    }
    Ok(ValidateResult {
        valid: false,
        errors: Some(errors),
    })
}

/// Writes `value` into `out`, stopping at `max` bytes (cut at a character boundary, `…`
/// appended): formatting stops there, so a huge instance quoted in a message costs no more.
fn bounded_display(out: &mut String, value: &impl std::fmt::Display, max: usize) {
    struct Bounded<'a> {
        out: &'a mut String,
        max: usize,
        cut: bool,
    }
    impl std::fmt::Write for Bounded<'_> {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            let room = self.max.saturating_sub(self.out.len());
            if text.len() <= room {
                self.out.push_str(text);
                return Ok(());
            }
            let mut end = room;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            self.out.push_str(&text[..end]);
            self.cut = true;
            Err(std::fmt::Error)
        }
    }
    let mut writer = Bounded {
        out,
        max,
        cut: false,
    };
    let _ = std::fmt::write(&mut writer, format_args!("{value}"));
    if writer.cut {
        writer.out.push('…');
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn validation_errors_are_bounded_in_count_and_bytes() {
        let long = "é".repeat(2000);
        let data = Value::Array((0..100).map(|_| json!(long)).collect());
        let schema = json!({"items": {"type": "integer"}});
        let limits = ValidateLimits::default();
        let result = validate(&data, &schema, &limits).unwrap();
        let errors = result.errors.unwrap();
        let size = |e: &SchemaError| {
            e.message.len() + e.instance_path.len() + e.schema_path.len() + e.keyword.len()
        };
        assert!(!errors.is_empty() && errors.len() <= limits.max_errors);
        for error in &errors {
            // 256 bytes at most, then `…`.
            assert!(
                error.message.len() <= limits.max_error_field_bytes + 3,
                "{error:?}"
            );
            assert!(error.message.ends_with('…'));
        }
        assert!(errors.iter().map(size).sum::<usize>() <= limits.max_errors_bytes);
        // A tighter byte limit reports fewer errors, but always the first.
        let tight = ValidateLimits {
            max_errors_bytes: 700,
            ..limits
        };
        let errors = validate(&data, &schema, &tight).unwrap().errors.unwrap();
        assert_eq!(errors.len(), 2);
        assert!(errors.iter().map(size).sum::<usize>() <= 700);
        let none = ValidateLimits {
            max_errors_bytes: 0,
            ..limits
        };
        assert_eq!(
            validate(&data, &schema, &none)
                .unwrap()
                .errors
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn validate_refuses_what_is_over_a_limit_as_invalid_params() {
        let mut defs = serde_json::Map::new();
        defs.insert("a0".into(), json!({"type": "integer"}));
        for i in 1..=22 {
            let below = format!("#/$defs/a{}", i - 1);
            defs.insert(
                format!("a{i}"),
                json!({"anyOf": [{"$ref": below}, {"$ref": below}]}),
            );
        }
        let schema = json!({"$defs": defs, "$ref": "#/$defs/a22"});
        let error = validate(&json!("x"), &schema, &ValidateLimits::default()).unwrap_err();
        assert_eq!(error.code, RpcError::invalid_params().code);
        assert!(error.message.contains("steps"), "{}", error.message);
        let huge = json!({"pattern": "a".repeat(2000)});
        let error = validate(&json!("x"), &huge, &ValidateLimits::default()).unwrap_err();
        assert_eq!(
            error.data,
            Some(json!({"field": "schema", "limit": "patternBytes", "max": 1024}))
        );
        // A pattern over the compiled-size limit is an invalid schema.
        let big = json!({"pattern": "[^x]{1000}"});
        let error = validate(&json!("x"), &big, &ValidateLimits::default()).unwrap_err();
        let data = error.data.unwrap();
        assert_eq!(data["field"], "schema");
        assert_eq!(data["errors"][0]["field"], "schema");
    }
}
